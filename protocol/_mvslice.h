/* protocol/_mvslice.h - a slice of a memoryview, made the way memoryview's own
 * ``view[start:stop]`` makes it, without the slice object and the generic subscript,
 * for the compiled extensions (protocol/_fastwire.c: a request's records;
 * broker/_lane.c: a frame of a connection's buffer), which slice the same kind of view
 * once or twice on every request.
 *
 * A one-dimensional, byte-sized, contiguous memoryview (what a connection's receive
 * buffer and a frame of it are) gets a new view registered with the same managed buffer
 * (PyMemoryView_FromObject, as the subscript does), then its start and length moved as
 * the subscript's slicing moves them: a step of 1 over contiguous bytes changes no flag
 * and no stride. Anything else (another object, a released view, more dimensions, a
 * range outside the view) goes through PySequence_GetSlice, which also raises for a
 * released view. Owns nothing else.
 */
#ifndef CHRONOLOG_MVSLICE_H
#define CHRONOLOG_MVSLICE_H

#include <Python.h>

/* obj[start:stop] (new reference; NULL with an error set) */
static inline PyObject *mv_slice(PyObject *obj, Py_ssize_t start, Py_ssize_t stop) {
    if (PyMemoryView_Check(obj)) {
        const PyMemoryViewObject *mv = (const PyMemoryViewObject *)obj;
        const Py_buffer *b = &mv->view;
        if (mv->mbuf != NULL && b->ndim == 1 && b->itemsize == 1 && b->suboffsets == NULL
            && b->strides != NULL && b->strides[0] == 1 && b->shape != NULL && 0 <= start && start <= stop
            && stop <= b->shape[0] && !(mv->flags & _Py_MEMORYVIEW_RELEASED)) {
            PyObject *s = PyMemoryView_FromObject(obj);
            if (s == NULL) return NULL;
            Py_buffer *v = &((PyMemoryViewObject *)s)->view;
            v->buf = (char *)v->buf + start;
            v->shape[0] = stop - start;
            v->len = stop - start;
            return s;
        }
    }
    return PySequence_GetSlice(obj, start, stop);
}

#endif
