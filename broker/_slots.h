/* broker/_slots.h - a __slots__ field read where it sits, for the broker's extensions
 * (_produce.c, _lane.c, _metrics.c), which read the same fields of the same generated message
 * classes on every request.
 *
 * Each call site keeps a SlotCache: the class it last read ``name`` from (and that class's
 * version tag, which changes if the class is changed) and the offset of the field in its
 * instances. While objects of that class come it reads the field there, as the member
 * descriptor does: a few instructions instead of getattr's ~150. Any other object, a
 * class whose attribute is not a plain object slot, or a class with its own
 * __getattribute__, goes through getattr, which also raises for a field not set.
 */
#ifndef CHRONOLOG_SLOTS_H
#define CHRONOLOG_SLOTS_H

#include <Python.h>
#include <structmember.h>

typedef struct {
    PyTypeObject *type;     /* borrowed: recognised only with its version tag */
    unsigned int version;
    Py_ssize_t offset;
} SlotCache;

/* obj.name, a new reference (NULL with an error set) */
static inline PyObject *slot_get(PyObject *obj, PyObject *name, SlotCache *c) {
    PyTypeObject *t = Py_TYPE(obj);
    if (t == c->type && t->tp_version_tag == c->version && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
        PyObject *v = *(PyObject **)((char *)obj + c->offset);
        if (v)
            return Py_NewRef(v);
    } else if (t->tp_getattro == PyObject_GenericGetAttr) {
        PyObject *d = _PyType_Lookup(t, name);  /* borrowed; sets the version tag */
        if (d && Py_IS_TYPE(d, &PyMemberDescr_Type) && (t->tp_flags & Py_TPFLAGS_VALID_VERSION_TAG)) {
            PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
            if (m->type == T_OBJECT_EX && PyType_IsSubtype(t, PyDescr_TYPE(d))) {
                c->type = t;
                c->version = t->tp_version_tag;
                c->offset = m->offset;
                PyObject *v = *(PyObject **)((char *)obj + m->offset);
                if (v)
                    return Py_NewRef(v);
            }
        }
    }
    return PyObject_GetAttr(obj, name);
}

/* the offset of the writable object slot named ``name`` in instances of ``cls`` (its own
 * __slots__, not a base class's), or -1 */
static inline Py_ssize_t slot_offset(PyTypeObject *cls, PyObject *name) {
    PyObject *d = PyDict_GetItemWithError(cls->tp_dict, name);
    if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type))
        return -1;
    PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
    return (m->type == T_OBJECT_EX && !(m->flags & READONLY)) ? m->offset : -1;
}

/* obj.name through a SlotCache of its own: one per place in the code that reads a field
 * (a GNU C statement expression, as gcc and clang compile) */
#define SLOT_GET(obj, name) ({ static SlotCache slot_cache_; slot_get((obj), (name), &slot_cache_); })

#endif
