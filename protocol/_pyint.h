/* protocol/_pyint.h - an int object's value, read inline, for the compiled extensions
 * (protocol/_recwalk.c, protocol/_fastwire.c, storage/_append.c, broker/_produce.c).
 *
 * Their hot paths read Python ints on every request: the codec's plan constants, the
 * offsets, positions and times held in segment and index slots, a batch's fields. CPython
 * 3.11's PyLong_AsLong spends about 50 instructions on each, through two calls (and
 * PyLong_AsLongLong several times that for anything over one 30-bit digit). An exact int
 * within 63 bits (any offset, position or millisecond time, and Long.MAX_VALUE) is read
 * here from its digits in a few instructions; anything else (a subclass, an object with
 * __index__, a larger value, an error) goes through the C API, so the contract is
 * PyLong_AsLongLong's: the value, or -1 with an exception set. Owns nothing else.
 */
#ifndef CHRONOLOG_PYINT_H
#define CHRONOLOG_PYINT_H

#include <Python.h>
#include <limits.h>

static inline long long pyint_as_ll(PyObject *o) {
#if PY_VERSION_HEX >= 0x030C0000
    /* 3.12+: the compact-value API of the int layout 3.12 introduced */
    if (PyLong_CheckExact(o) && PyUnstable_Long_IsCompact((PyLongObject *)o))
        return (long long)PyUnstable_Long_CompactValue((PyLongObject *)o);
#else
    /* 3.11: the sign in ob_size, the magnitude in PyLong_SHIFT-bit digits */
    if (PyLong_CheckExact(o)) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        switch (Py_SIZE(o)) {
        case 0: return 0;
        case 1: return (long long)d[0];
        case -1: return -(long long)d[0];
        case 2: return (long long)(((unsigned long long)d[1] << PyLong_SHIFT) | d[0]);
        case -2: return -(long long)(((unsigned long long)d[1] << PyLong_SHIFT) | d[0]);
        case 3: case -3:  /* up to 63 bits (Long.MAX_VALUE, a bound the validator passes) */
            if (PyLong_SHIFT == 30 && d[2] < 8) {
                long long m = (long long)(((unsigned long long)d[2] << 60) | ((unsigned long long)d[1] << 30) | d[0]);
                return Py_SIZE(o) > 0 ? m : -m;
            }
            break;
        default: break;
        }
    }
#endif
#if LONG_MAX == LLONG_MAX
    /* LP64: PyLong_AsLong reads a multi-digit int directly, where 3.11's
     * PyLong_AsLongLong goes through _PyLong_AsByteArray; both raise OverflowError past
     * 64 bits */
    return PyLong_AsLong(o);
#else
    return PyLong_AsLongLong(o);
#endif
}

#endif
