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
 *   setup(append_produced, new_answer, no_leader, internal_topics, on_duplicate,
 *         new_topic_answer, new_request_answer, not_common)
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
 *   handle(request, logs, now_ms, tally, notify, produced[, writable])
 *       -> response | None | not_common | (position, items, results, exception or None)
 *       A whole Produce v3+ request the way produce.handle takes it when it has no
 *       transactional id and acks of -1, 0 or 1 (else ``not_common``, nothing done).
 *       ``writable``: None when no authorization is asked (no authorizer), else the set of
 *       topic names the authorizer allowed the connection's principal to write
 *       (Authorizer.allowed_names): a topic not in it makes the request ``not_common``
 *       before anything is done, for the Python path to ask the authorizer. Then the
 *       items made from its topic_data, any transactional first batch answered by the
 *       Python path (``not_common``, before anything is appended), then run() from the first; when
 *       every item is taken, the answer as produce._respond makes it (a topic answer per
 *       topic, ``produced`` (the metrics' hook, or None) told, None for acks=0; a
 *       one-topic answer is the last one made again when nothing else holds it, see
 *       keep()). When an item is not taken it returns where the run stopped, for the
 *       handler's loop to go on from there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"
#include "_exc.h"
#include "../protocol/_pyint.h"

#define V2_HEADER 61        /* a v2 batch header's bytes */
#define MAGIC_POS 16        /* the magic byte */
#define ATTR_LOW 22         /* the attributes' low byte (big-endian int16 at 21) */
#define TRANSACTIONAL 0x10  /* in that byte */

static PyObject *append_produced, *new_answer, *no_leader, *internal_topics, *on_duplicate, *new_topic_answer,
    *new_request_answer, *not_common, *zero, *one, *s_acks, *s_transactional_id, *s_topic_data, *s_name,
    *s_partition_data, *s_index, *s_records, *s_responses, *s_partition_responses;
/* the last one-topic answer and the objects its fields hold, lists aside (see keep()); the
 * classes of it and of its topic answer, and where their fields are */
static PyObject *kept, *kept_values;
static PyTypeObject *kept_type, *kept_topic_type;
static Py_ssize_t responses_at, name_at, parts_at;
static void forget(void);

static PyObject *pr_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 8 || !PyAnySet_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "setup(append_produced, new_answer, no_leader, internal_topics, "
                                         "on_duplicate, new_topic_answer, new_request_answer, not_common): "
                                         "internal_topics a set");
        return NULL;
    }
    Py_XSETREF(new_topic_answer, Py_NewRef(args[5]));
    Py_XSETREF(new_request_answer, Py_NewRef(args[6]));
    Py_XSETREF(not_common, Py_NewRef(args[7]));
    forget();  /* made by the classes before */
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
        t = PyList_New(3);  /* [0, 0, None] */
        if (t) {
            PyList_SET_ITEM(t, 0, Py_NewRef(zero));
            PyList_SET_ITEM(t, 1, Py_NewRef(zero));
            PyList_SET_ITEM(t, 2, Py_NewRef(Py_None));
        }
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
    long long lat = pyint_as_ll(PyTuple_GET_ITEM(info, 2));
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
    long long ts = pyint_as_ll(max_ts), now = pyint_as_ll(now_obj);
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
    PyObject *value = take_exception();
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

static PyObject *run_from(PyObject *logs, PyObject *items, Py_ssize_t i, PyObject *now_obj, PyObject *results,
                          PyObject *tally, PyObject *notify);

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
    return run_from(logs, items, i, now_obj, results, tally, notify);
}

/* run()'s loop: the position where it stopped, or (position, exception) */
static PyObject *run_from(PyObject *logs, PyObject *items, Py_ssize_t i, PyObject *now_obj, PyObject *results,
                          PyObject *tally, PyObject *notify) {
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

/* whether records (a partition's, None or bytes-like) start with a transactional v2
 * batch, as produce.handle's scan asks (Kafka's RequestUtils.hasTransactionalRecords):
 * 1, 0, -1 with an error set */
static int transactional_first(PyObject *records) {
    if (records == Py_None)
        return 0;
    Py_buffer view;
    if (PyObject_GetBuffer(records, &view, PyBUF_SIMPLE) < 0)
        return -1;
    const unsigned char *b = view.buf;
    int t = view.len >= V2_HEADER && b[MAGIC_POS] == 2 && (b[ATTR_LOW] & TRANSACTIONAL);
    PyBuffer_Release(&view);
    return t;
}

/* the request's (topic, partition, records) items in request order, and the number of
 * partitions of each topic in ``counts``; NULL with ``*common`` 0 when a partition's first
 * batch is transactional or a topic is not in ``writable`` (a set, or None: not asked),
 * the Python path's cases; NULL with an error set otherwise */
static PyObject *items_of(PyObject *topic_data, PyObject *writable, PyObject *counts, int *common) {
    PyObject *items = PyList_New(0), *topics = PySequence_Fast(topic_data, "topic_data is a list");
    *common = 1;
    if (!items || !topics)
        goto fail;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(topics); t++) {
        PyObject *td = PySequence_Fast_GET_ITEM(topics, t);
        PyObject *name = SLOT_GET(td, s_name), *pd = NULL, *parts = NULL;
        if (!name || !(pd = SLOT_GET(td, s_partition_data))
            || !(parts = PySequence_Fast(pd, "partition_data is a list"))) {
            Py_XDECREF(name);
            Py_XDECREF(pd);
            goto fail;
        }
        Py_DECREF(pd);
        int allowed = writable == Py_None ? 1 : PySet_Contains(writable, name);
        if (allowed != 1) {  /* 0: not the compiled path's; -1: an error set */
            if (allowed == 0)
                *common = 0;
            Py_DECREF(name);
            Py_DECREF(parts);
            goto fail;
        }
        Py_ssize_t n = PySequence_Fast_GET_SIZE(parts);
        PyObject *count = PyLong_FromSsize_t(n);
        int ok = count && PyList_Append(counts, count) == 0;
        Py_XDECREF(count);
        for (Py_ssize_t p = 0; ok && p < n; p++) {
            PyObject *pp = PySequence_Fast_GET_ITEM(parts, p), *index = SLOT_GET(pp, s_index), *records = NULL,
                     *item = NULL;
            int txn = -1;
            if (index && (records = SLOT_GET(pp, s_records)) && (txn = transactional_first(records)) == 0
                && (item = PyTuple_Pack(3, name, index, records)))
                ok = PyList_Append(items, item) == 0;
            else
                ok = 0;
            if (txn == 1)
                *common = 0;
            Py_XDECREF(index);
            Py_XDECREF(records);
            Py_XDECREF(item);
        }
        Py_DECREF(name);
        Py_DECREF(parts);
        if (!ok)
            goto fail;
    }
    Py_DECREF(topics);
    return items;
fail:
    Py_XDECREF(items);
    Py_XDECREF(topics);
    return NULL;
}

/* The answer of the last one-topic request (a ProduceResponse, its ``responses`` list, its
 * TopicProduceResponse), made again for the next one-topic request when nothing else
 * holds any of it: its topic's name and partitions' answers replaced, every other field
 * as it was made. A one-record produce made and freed those two answers and two lists
 * on every request (about 2,000 instructions); CPython's enumerate and zip reuse their
 * result tuple the same way. Nothing can tell: the answer is only made again when its
 * and its lists' reference counts say this module holds the only references, and when
 * every other field still holds the object it was made with (``kept_values``, held, so
 * no other object can take its place); anything else gets a new answer. The answer of a
 * request with acks=0 is not kept (there is none). */

/* the objects the object slots of obj's class hold, lists aside (and the slot at
 * ``skip``), appended to ``into``; -1 (error set) or 1 (an unset slot: not to keep) */
static int slot_values(PyObject *obj, PyObject *into, Py_ssize_t skip) {
    for (PyMemberDef *m = Py_TYPE(obj)->tp_members; m && m->name; m++) {
        if (m->type != T_OBJECT_EX || m->offset == skip)
            continue;
        PyObject *v = *(PyObject **)((char *)obj + m->offset);
        if (!v)
            return 1;
        if (!PyList_CheckExact(v) && PyList_Append(into, v) < 0)
            return -1;
    }
    return 0;
}

#define AT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* the kept answer's topic answer when the kept answer may be made again (borrowed), else NULL */
static PyObject *kept_topic(void) {
    PyObject *a = kept;
    if (!a || Py_REFCNT(a) != 1 || Py_TYPE(a) != kept_type)
        return NULL;
    PyObject *responses = AT(a, responses_at), *t;
    if (!responses || !PyList_CheckExact(responses) || Py_REFCNT(responses) != 1 || PyList_GET_SIZE(responses) != 1
        || Py_REFCNT(t = PyList_GET_ITEM(responses, 0)) != 1 || Py_TYPE(t) != kept_topic_type)
        return NULL;
    PyObject *parts = AT(t, parts_at);
    if (!parts || !PyList_CheckExact(parts) || Py_REFCNT(parts) != 1)
        return NULL;
    /* every other list empty and held by its field alone, every other field unchanged */
    PyObject *objs[2] = {a, t};
    Py_ssize_t k = 0, nv = PyList_GET_SIZE(kept_values);
    for (int i = 0; i < 2; i++) {
        for (PyMemberDef *m = Py_TYPE(objs[i])->tp_members; m && m->name; m++) {
            if (m->type != T_OBJECT_EX || (i == 1 && m->offset == name_at))
                continue;
            PyObject *v = AT(objs[i], m->offset);
            if (!v)
                return NULL;
            if (PyList_CheckExact(v)) {
                if (v != responses && v != parts && (Py_REFCNT(v) != 1 || PyList_GET_SIZE(v) != 0))
                    return NULL;
            } else if (k >= nv || PyList_GET_ITEM(kept_values, k++) != v) {
                return NULL;
            }
        }
    }
    return k == nv ? t : NULL;
}

/* the kept answer made again for one topic ``name`` with ``parts`` (new reference), or
 * NULL (no error set) when it may not be */
static PyObject *remade(PyObject *name, PyObject *parts) {
    PyObject *t = kept_topic();
    if (!t)
        return NULL;
    Py_XSETREF(AT(t, name_at), Py_NewRef(name));
    Py_XSETREF(AT(t, parts_at), Py_NewRef(parts));
    return Py_NewRef(kept);
}

/* nothing kept */
static void forget(void) {
    Py_CLEAR(kept);
    Py_CLEAR(kept_values);
    Py_CLEAR(kept_type);
    Py_CLEAR(kept_topic_type);
}

/* a one-topic request's new answer kept, to be made again (nothing kept when it cannot be) */
static void keep(PyObject *answer) {
    forget();
    Py_ssize_t r_at = slot_offset(Py_TYPE(answer), s_responses), n_at = -1, p_at = -1;
    PyObject *responses = r_at < 0 ? NULL : AT(answer, r_at), *t = NULL, *values = PyList_New(0);
    if (values && responses && PyList_CheckExact(responses) && PyList_GET_SIZE(responses) == 1
        && (n_at = slot_offset(Py_TYPE(t = PyList_GET_ITEM(responses, 0)), s_name)) >= 0
        && (p_at = slot_offset(Py_TYPE(t), s_partition_responses)) >= 0
        && slot_values(answer, values, -1) == 0 && slot_values(t, values, n_at) == 0) {
        kept = Py_NewRef(answer);
        kept_values = Py_NewRef(values);
        kept_type = (PyTypeObject *)Py_NewRef(Py_TYPE(answer));  /* held: compared by address */
        kept_topic_type = (PyTypeObject *)Py_NewRef(Py_TYPE(t));
        responses_at = r_at;
        name_at = n_at;
        parts_at = p_at;
    }
    Py_XDECREF(values);
    PyErr_Clear();
}

/* produce._respond: a topic answer per topic (its partitions' answers, in request
 * order), the metrics told, the request's answer (None for acks=0) */
static PyObject *respond(PyObject *topic_data, PyObject *counts, PyObject *results, PyObject *tally,
                         PyObject *produced, long acks) {
    PyObject *topics = PySequence_Fast(topic_data, "topic_data is a list"), *responses = NULL;
    if (!topics)
        goto fail;
    int one_topic = acks != 0 && PySequence_Fast_GET_SIZE(topics) == 1;
    if (one_topic) {  /* the last one-topic answer made again, when it may be */
        PyObject *name = SLOT_GET(PySequence_Fast_GET_ITEM(topics, 0), s_name), *again;
        if (!name)
            goto fail;
        again = remade(name, results);
        Py_DECREF(name);
        if (again) {
            Py_DECREF(topics);
            if (produced != Py_None) {
                PyObject *margs[2] = {AT(again, responses_at), tally};
                PyObject *r = PyObject_Vectorcall(produced, margs, 2, NULL);
                if (!r) {
                    Py_DECREF(again);
                    return NULL;
                }
                Py_DECREF(r);
            }
            return again;
        }
    }
    if (!(responses = PyList_New(0)))
        goto fail;
    Py_ssize_t at = 0;
    for (Py_ssize_t t = 0; t < PySequence_Fast_GET_SIZE(topics); t++) {
        Py_ssize_t n = PyLong_AsSsize_t(PyList_GET_ITEM(counts, t));
        PyObject *name = SLOT_GET(PySequence_Fast_GET_ITEM(topics, t), s_name), *parts = NULL, *answer = NULL;
        /* one topic: its partitions' answers are all of them, the list itself */
        int ok = name && (parts = PySequence_Fast_GET_SIZE(topics) == 1 && at == 0 && n == PyList_GET_SIZE(results)
                                      ? Py_NewRef(results) : PyList_GetSlice(results, at, at + n));
        if (ok) {
            PyObject *fields[2] = {name, parts};  /* name, partition_responses */
            ok = (answer = PyObject_Vectorcall(new_topic_answer, fields, 2, NULL)) && PyList_Append(responses, answer) == 0;
        }
        Py_XDECREF(name);
        Py_XDECREF(parts);
        Py_XDECREF(answer);
        if (!ok)
            goto fail;
        at += n;
    }
    Py_CLEAR(topics);
    if (produced != Py_None) {
        PyObject *margs[2] = {responses, tally};
        PyObject *r = PyObject_Vectorcall(produced, margs, 2, NULL);
        if (!r)
            goto fail;
        Py_DECREF(r);
    }
    if (acks == 0) {
        Py_DECREF(responses);
        Py_RETURN_NONE;
    }
    PyObject *fields[2] = {responses, zero};  /* responses, throttle_time_ms */
    PyObject *answer = PyObject_Vectorcall(new_request_answer, fields, 2, NULL);
    Py_DECREF(responses);
    if (answer && one_topic)
        keep(answer);
    return answer;
fail:
    Py_XDECREF(responses);
    Py_XDECREF(topics);
    return NULL;
}

static PyObject *pr_handle(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "handle(request, logs, now_ms, tally, notify, produced[, writable])");
        return NULL;
    }
    if (!new_topic_answer) {
        PyErr_SetString(PyExc_RuntimeError, "broker._produce.setup() was not called");
        return NULL;
    }
    PyObject *request = args[0], *logs = args[1], *now_obj = args[2], *tally = args[3], *notify = args[4],
             *produced = args[5], *writable = nargs == 7 ? args[6] : Py_None;
    if (!PyDict_Check(logs) || !PyLong_Check(now_obj) || (tally != Py_None && !PyDict_Check(tally))
        || (writable != Py_None && !PyAnySet_Check(writable))) {
        PyErr_SetString(PyExc_TypeError, "handle: logs a dict, now_ms an int, tally a dict or None, writable a set "
                                         "or None");
        return NULL;
    }
    PyObject *acks_obj = SLOT_GET(request, s_acks);
    if (!acks_obj)
        return NULL;
    int overflow;
    long acks = PyLong_Check(acks_obj) ? PyLong_AsLongAndOverflow(acks_obj, &overflow) : 2;
    Py_DECREF(acks_obj);
    if (acks == -1 && PyErr_Occurred())
        return NULL;
    if (acks < -1 || acks > 1 || overflow)
        return Py_NewRef(not_common);
    PyObject *txn_id = SLOT_GET(request, s_transactional_id);
    if (!txn_id)
        return NULL;
    Py_DECREF(txn_id);
    if (txn_id != Py_None)
        return Py_NewRef(not_common);
    PyObject *topic_data = SLOT_GET(request, s_topic_data), *counts = PyList_New(0), *items = NULL,
             *results = NULL, *stop = NULL, *out = NULL;
    int common = 1;
    if (!topic_data || !counts || !(items = items_of(topic_data, writable, counts, &common))) {
        if (!PyErr_Occurred() && !common)
            out = Py_NewRef(not_common);
        goto done;
    }
    if (!(results = PyList_New(0)) || !(stop = run_from(logs, items, 0, now_obj, results, tally, notify)))
        goto done;
    if (PyLong_Check(stop) && PyLong_AsSsize_t(stop) == PyList_GET_SIZE(items))
        out = respond(topic_data, counts, results, tally, produced, acks);
    else if (PyLong_Check(stop))  /* stopped at an item the Python path takes */
        out = PyTuple_Pack(4, stop, items, results, Py_None);
    else  /* (position, exception) */
        out = PyTuple_Pack(4, PyTuple_GET_ITEM(stop, 0), items, results, PyTuple_GET_ITEM(stop, 1));
done:
    Py_XDECREF(topic_data);
    Py_XDECREF(counts);
    Py_XDECREF(items);
    Py_XDECREF(results);
    Py_XDECREF(stop);
    return out;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))pr_setup, METH_FASTCALL,
     "setup(append_produced, new_answer, no_leader, internal_topics, on_duplicate, new_topic_answer, "
     "new_request_answer, not_common)"},
    {"run", (PyCFunction)(void (*)(void))pr_run, METH_FASTCALL,
     "run(logs, items, start, now_ms, results, tally, notify) -> int | (int, exception): the common case of "
     "a run of a Produce v3+ request's partitions"},
    {"handle", (PyCFunction)(void (*)(void))pr_handle, METH_FASTCALL,
     "handle(request, logs, now_ms, tally, notify, produced[, writable]) -> response | None | not_common | "
     "(position, items, results, exception or None): a whole Produce v3+ request without a transactional id"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_produce", NULL, -1, methods};

PyMODINIT_FUNC PyInit__produce(void) {
    if (!(zero = PyLong_FromLong(0)) || !(one = PyLong_FromLong(1)) || !(s_acks = PyUnicode_InternFromString("acks"))
        || !(s_transactional_id = PyUnicode_InternFromString("transactional_id"))
        || !(s_topic_data = PyUnicode_InternFromString("topic_data")) || !(s_name = PyUnicode_InternFromString("name"))
        || !(s_partition_data = PyUnicode_InternFromString("partition_data"))
        || !(s_index = PyUnicode_InternFromString("index")) || !(s_records = PyUnicode_InternFromString("records"))
        || !(s_responses = PyUnicode_InternFromString("responses"))
        || !(s_partition_responses = PyUnicode_InternFromString("partition_responses")))
        return NULL;
    return PyModule_Create(&module);
}
