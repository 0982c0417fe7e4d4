/* broker/_exc.h - the exception being raised, taken whole, for the broker's extensions
 * (_produce.c, _lane.c), which hand an exception raised under them back to the Python
 * path as a value (with its traceback) instead of raising it.
 */
#ifndef CHRONOLOG_EXC_H
#define CHRONOLOG_EXC_H

#include <Python.h>

/* The exception set now, normalized, its traceback attached, the error indicator
 * cleared: a new reference, or NULL when none is set (PyErr_GetRaisedException from
 * CPython 3.12 on). */
static inline PyObject *take_exception(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (value && tb)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
#endif
}

#endif
