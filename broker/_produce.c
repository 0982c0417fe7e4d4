/* broker/_produce.c - the produce handler's per-partition loop for its common case,
 * compiled: for each partition of a Produce v3+ request whose records are one plain v2
 * batch that validates, what broker/handlers/produce.py does in _append_one,
 * Log.append_produced and _appended (find the partition's log, validate and append,
 * count it for the metrics, tell the fetch waiters, make its answer), in one call for a
 * run of partitions instead of about eight Python frames per partition.
 *
 * Owns no format and no rule of its own: the append is Log.append_produced's compiled body
 * (storage/_append.c append_produced: validation, then the append), the answer the
 * generated PartitionProduceResponse._new; each is handed over by setup() and called here
 * as the Python code calls it. At the first
 * partition that is not this case (no log, an internal topic, records the validator
 * does not take, anything the caller replaced the records with) it stops and returns
 * that partition's position: the handler's Python path takes it, and names any problem,
 * then may call run() again for the rest. The tests run the same requests through both
 * and compare answers, files, offsets and metrics.
 *
 *   setup(append_produced, new_answer, no_leader, internal_topics, on_duplicate)
 *       once, from broker.handlers.produce at import
 *   run(logs, items, start, now_ms, results, tally, notify) -> int | (int, exception)
 *       ``logs``: the log manager's {(topic, partition): Log}; ``items``: the request's
 *       [(topic, partition, records)] in request order. From ``start``, each item is
 *       appended at ``now_ms`` and its answer appended to ``results``; returns the
 *       position of the first item not taken (len(items) when all were), or that
 *       position with the exception its validation or append raised (the caller
 *       answers it as it answers any storage error, then goes on after it).
 *       ``tally``: None (metrics off) or {topic: [bytes, messages, delays]} added to for
 *       each non-duplicate append, as produce.py's _count adds; ``notify``: None or
 *       ctx.notify_append, called (topic, partition) after each non-duplicate append.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define V2_HEADER 61        /* a v2 batch header's bytes */
#define MAGIC_POS 16        /* the magic byte */
#define ATTR_LOW 22         /* the attributes' low byte (big-endian int16 at 21) */
#define TRANSACTIONAL 0x10  /* in that byte */

static PyObject *append_produced, *new_answer, *no_leader, *internal_topics, *on_duplicate, *zero, *one;

static PyObject *pr_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 5 || !PyAnySet_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "setup(append_produced, new_answer, no_leader, internal_topics, "
                                         "on_duplicate): internal_topics a set");
        return NULL;
    }
    Py_XSETREF(append_produced, Py_NewRef(args[0]));
    Py_XSETREF(new_answer, Py_NewRef(args[1]));
    Py_XSETREF(no_leader, Py_NewRef(args[2]));
    Py_XSETREF(internal_topics, Py_NewRef(args[3]));
    Py_XSETREF(on_duplicate, Py_NewRef(args[4]));
    Py_RETURN_NONE;
}

/* list[i] += v for an int item (v a new reference, stolen); -1 with an error set */
static int add_to(PyObject *list, Py_ssize_t i, PyObject *v) {
    if (!v)
        return -1;
    PyObject *sum = PyNumber_Add(PyList_GET_ITEM(list, i), v);
    Py_DECREF(v);
    if (!sum)
        return -1;
    return PyList_SetItem(list, i, sum);
}

/* the metrics' part of one non-duplicate append (produce.py's _count): bytes, messages,
 * and for a CreateTime topic's append (no log append time) a list of delays, with the
 * delay of its one batch, now - maxTimestamp, when that is a timestamp */
static int count(PyObject *tally, PyObject *topic, Py_ssize_t nbytes, PyObject *info, PyObject *now_obj) {
    if (nbytes < 0)
        return -1;
    PyObject *t = PyDict_GetItemWithError(tally, topic);
    if (!t) {
        if (PyErr_Occurred())
            return -1;
        t = Py_BuildValue("[iiO]", 0, 0, Py_None);
        if (!t || PyDict_SetItem(tally, topic, t) < 0) {
            Py_XDECREF(t);
            return -1;
        }
        Py_DECREF(t);  /* the dict holds it */
    }
    if (!PyList_Check(t) || PyList_GET_SIZE(t) != 3) {
        PyErr_SetString(PyExc_TypeError, "a tally is [bytes, messages, delays or None]");
        return -1;
    }
    /* AppendInfo: base_offset, last_offset, log_append_time, log_start_offset,
     * record_count, max_timestamp, duplicate */
    if (add_to(t, 0, PyLong_FromSsize_t(nbytes)) < 0 || add_to(t, 1, Py_NewRef(PyTuple_GET_ITEM(info, 4))) < 0)
        return -1;
    long long lat = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 2));
    if (lat == -1 && PyErr_Occurred())
        return -1;
    if (lat >= 0)
        return 0;
    PyObject *delays = PyList_GET_ITEM(t, 2);
    if (delays == Py_None) {
        if (!(delays = PyList_New(0)) || PyList_SetItem(t, 2, delays) < 0)
            return -1;
    } else if (!PyList_Check(delays)) {
        PyErr_SetString(PyExc_TypeError, "a tally's delays are a list");
        return -1;
    }
    PyObject *max_ts = PyTuple_GET_ITEM(info, 5);
    if (max_ts == Py_None)
        return 0;
    long long ts = PyLong_AsLongLong(max_ts), now = PyLong_AsLongLong(now_obj);
    if ((ts == -1 || now == -1) && PyErr_Occurred())
        return -1;
    if (ts < 0)
        return 0;
    PyObject *delay = PyLong_FromLongLong(now - ts);
    if (!delay)
        return -1;
    int r = PyList_Append(delays, delay);
    Py_DECREF(delay);
    return r;
}

/* records: one plain (not transactional) v2 batch's worth of bytes at least; the
 * validator checks the rest */
static int plain_v2(PyObject *records) {
    if (!PyMemoryView_Check(records) && !PyByteArray_Check(records))
        return 0;  /* the validator patches in place: a writable buffer only */
    Py_buffer view;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        return 0;
    }
    const unsigned char *b = view.buf;
    int ok = view.len >= V2_HEADER && b[MAGIC_POS] == 2 && !(b[ATTR_LOW] & TRANSACTIONAL);
    PyBuffer_Release(&view);
    return ok;
}

static PyObject *stopped_by(Py_ssize_t i) {
    /* an item's validation or append raised: (i, exception), the error cleared; not
     * an Exception (KeyboardInterrupt, SystemExit): raised on */
    if (!PyErr_ExceptionMatches(PyExc_Exception))
        return NULL;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb && value)
        PyException_SetTraceback(value, tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    if (!value)
        return NULL;
    return Py_BuildValue("(nN)", i, value);
}

/* what take() did with an item */
enum { TAKEN, NOT_TAKEN, RAISED, FAILED };

/* one item (topic, partition, records): TAKEN (appended, answered, counted); NOT_TAKEN
 * (nothing done: the Python path's case); RAISED (its validation or append raised an
 * Exception, left set for the caller); FAILED (an error of this code, set) */
static int take(PyObject *logs, PyObject *item, PyObject *now_obj, PyObject *results, PyObject *tally,
                PyObject *notify) {
    if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3)
        return NOT_TAKEN;
    PyObject *topic = PyTuple_GET_ITEM(item, 0), *partition = PyTuple_GET_ITEM(item, 1),
             *records = PyTuple_GET_ITEM(item, 2);
    if (!PyUnicode_CheckExact(topic) || !plain_v2(records))
        return NOT_TAKEN;
    int internal = PySet_Contains(internal_topics, topic);
    if (internal != 0)
        return internal < 0 ? FAILED : NOT_TAKEN;
    PyObject *key = PyTuple_Pack(2, topic, partition);
    if (!key)
        return FAILED;
    PyObject *log = PyDict_GetItemWithError(logs, key);  /* borrowed */
    Py_DECREF(key);
    if (!log)  /* not here (or not loaded yet): LogManager.get_log */
        return PyErr_Occurred() ? FAILED : NOT_TAKEN;

    /* Log.append_produced (None: not its case, nothing done) */
    int status = FAILED;
    PyObject *info = NULL, *answer = NULL, *record_errors = NULL;
    Py_INCREF(log);  /* held while the append runs Python code */
    PyObject *aargs[4] = {log, records, now_obj, one};
    info = PyObject_Vectorcall(append_produced, aargs, 4, NULL);
    if (info == Py_None) {
        status = NOT_TAKEN;
        goto done;
    }
    if (!info) {
        status = RAISED;
        goto done;
    }
    if (!PyTuple_Check(info) || PyTuple_GET_SIZE(info) != 7) {
        PyErr_SetString(PyExc_TypeError, "an append returned no AppendInfo");
        goto done;
    }
    /* _appended: counted and the waiters told, unless a retried batch (its first
     * offsets answered again) */
    int duplicate = PyObject_IsTrue(PyTuple_GET_ITEM(info, 6));
    if (duplicate < 0)
        goto done;
    if (duplicate) {
        PyObject *dargs[3] = {topic, partition, PyTuple_GET_ITEM(info, 0)};
        PyObject *r = PyObject_Vectorcall(on_duplicate, dargs, 3, NULL);
        if (!r)
            goto done;
        Py_DECREF(r);
    } else {
        if (tally != Py_None && count(tally, topic, PyObject_Length(records), info, now_obj) < 0)
            goto done;
        if (notify != Py_None) {
            PyObject *nargs[2] = {topic, partition};
            PyObject *r = PyObject_Vectorcall(notify, nargs, 2, NULL);
            if (!r)
                goto done;
            Py_DECREF(r);
        }
    }
    /* index, error_code, base_offset, log_append_time_ms, log_start_offset,
     * record_errors, error_message, current_leader */
    if (!(record_errors = PyList_New(0)))
        goto done;
    PyObject *fields[8] = {partition, zero, PyTuple_GET_ITEM(info, 0), PyTuple_GET_ITEM(info, 2),
                           PyTuple_GET_ITEM(info, 3), record_errors, Py_None, no_leader};
    if (!(answer = PyObject_Vectorcall(new_answer, fields, 8, NULL)) || PyList_Append(results, answer) < 0)
        goto done;
    status = TAKEN;
done:
    Py_XDECREF(record_errors);
    Py_XDECREF(answer);
    Py_XDECREF(info);
    Py_DECREF(log);
    return status;
}

static PyObject *pr_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "run(logs, items, start, now_ms, results, tally, notify)");
        return NULL;
    }
    if (!append_produced) {
        PyErr_SetString(PyExc_RuntimeError, "broker._produce.setup() was not called");
        return NULL;
    }
    PyObject *logs = args[0], *items = args[1], *now_obj = args[3], *results = args[4], *tally = args[5],
             *notify = args[6];
    Py_ssize_t i = PyLong_AsSsize_t(args[2]);
    if (i == -1 && PyErr_Occurred())
        return NULL;
    if (!PyDict_Check(logs) || !PyList_Check(items) || !PyList_Check(results) || !PyLong_Check(now_obj)
        || (tally != Py_None && !PyDict_Check(tally))) {
        PyErr_SetString(PyExc_TypeError, "run: logs a dict, items and results lists, now_ms an int, tally a dict "
                                         "or None");
        return NULL;
    }
    for (; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = Py_NewRef(PyList_GET_ITEM(items, i));  /* held while Python code runs */
        int status = take(logs, item, now_obj, results, tally, notify);
        Py_DECREF(item);
        if (status == NOT_TAKEN)
            break;
        if (status == RAISED)
            return stopped_by(i);
        if (status == FAILED)
            return NULL;
    }
    return PyLong_FromSsize_t(i);
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))pr_setup, METH_FASTCALL,
     "setup(append_produced, new_answer, no_leader, internal_topics, on_duplicate)"},
    {"run", (PyCFunction)(void (*)(void))pr_run, METH_FASTCALL,
     "run(logs, items, start, now_ms, results, tally, notify) -> int | (int, exception): the common case of "
     "a run of a Produce v3+ request's partitions"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_produce", NULL, -1, methods};

PyMODINIT_FUNC PyInit__produce(void) {
    if (!(zero = PyLong_FromLong(0)) || !(one = PyLong_FromLong(1)))
        return NULL;
    return PyModule_Create(&module);
}
