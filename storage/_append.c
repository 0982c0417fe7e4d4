/* storage/_append.c - the produce path's common append, compiled: what Log._append,
 * Log._write and LogSegment.append_unindexed do for one v2 batch without a producer id
 * (producerId -1) appended to an active segment that needs no roll and no index entry for
 * it, in one call instead of three Python frames and their helpers.
 *
 * Owns no on-disk format and no state. It reads and writes fields of the objects of
 * storage/log.py (Log), storage/segment.py (LogSegment, _LogFile) and storage/index.py
 * (an index's ``entries`` and ``max_entries``), each declared in its class's __slots__ so
 * that it sits at a fixed offset of the object, with the same values and in the same
 * cases as those methods, which stay the reference: the tests drive the same appends
 * through both and compare every file and every field.
 *
 *   setup(append_info_type, log_type, segment_type, index_type, file_type, unknown, validate)
 *       once, from storage.log at import: AppendInfo; Log, LogSegment, AbstractIndex and
 *       _LogFile, whose fields' offsets it takes from their member descriptors; and
 *       storage.segment._UNKNOWN (a segment's first timestamp not known yet). The append
 *       marks its file used (``_recent``) as storage.open_files.OpenFiles.touch does.
 *       ``validate``: storage.validator.validate_common (protocol/_recwalk.c)
 *   append_produced(log, records, now_ms, max_batches) -> AppendInfo | None
 *       Log.append_produced, all of it: None for a closed log or records validate_common
 *       does not take (nothing done), else validated and appended by append_one, or
 *       (an idempotent producer's next batch) by append_idempotent below, or by
 *       Log._append when it is neither's case; raises what they raise. Log's
 *       method and the produce handler's compiled loop (broker/_produce.c) both call it.
 *   setup_producers(entry_type, new_batch_metadata)
 *       once, from storage.log at import: storage.producer_state's ProducerStateEntry and
 *       what makes a BatchMetadata from a tuple. Until then append_idempotent is not tried.
 *
 * append_idempotent: what Log._append does for one batch of an idempotent producer in the
 * simplest case of the producer state's checks (ProducerStateManager.prepare_one, then
 * append_one with producer_checked, then apply_one): a non-transactional batch of a
 * producer the partition knows, at its epoch, with no transaction ongoing, whose first
 * sequence is the one after its last batch's (no wrap past Int32.MAX) and which is none
 * of its last batches again. Any other batch, or anything unexpected, is left to
 * Log._append with nothing changed; a failed write too (append_one's None).
 *   append_one(log, va, now_ms, producer_checked=False) -> AppendInfo | None
 *       (a batch past index.interval.bytes included: after the write it calls
 *       LogSegment._index_entry for the index entries, as LogSegment.append makes them)
 *       ``va``: the ValidatedAppend (storage.validator) whose base offset is the log end;
 *       ``now_ms``: the append's clock reading; ``producer_checked``: the batch carries a
 *       producer id that Log._append has checked against the producer state (it installs
 *       the update after this returns the append), else it must carry none. None when the append is not that case or
 *       anything is unexpected (the segment file's descriptor released, a short write, a
 *       value out of 64 bits), with nothing changed: the caller then takes Log._append,
 *       which handles every case and raises every error. The write is one pwrite at the
 *       segment's size, the GIL released as os.pwrite releases it; a partial write is
 *       rewritten whole by the fallback at the same position.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <limits.h>
#include <stdint.h>
#include <unistd.h>
#include "../protocol/_pyint.h"

#define PRODUCER_ID_OFFSET 43 /* of the big-endian int64 producerId in a v2 batch header */
#define PRODUCER_EPOCH_OFFSET 51 /* int16 */
#define BASE_SEQUENCE_OFFSET 53 /* int32 */
#define ATTRIBUTES_LOW_BYTE 22 /* of the int16 attributes, whose 0x10 bit is isTransactional */
#define TRANSACTIONAL_BIT 0x10
#define REL_OFFSET_MAX 2147483647LL /* an offset index stores offsets relative to the base as int32 */

static PyObject *s_index_entry;
static PyObject *entry_type, *new_batch_metadata, *s_producers, *s_producer_epoch, *s_batches,
    *s_current_txn_first_offset, *s_last_timestamp, *s_append_name;
static PyObject *append_info_type, *log_type, *segment_type, *index_type, *file_type, *unknown_ts,
    *s_flush, *s_map_end_offset, *validate_fn, *s_latest_epoch, *s_append;

/* Where each field lives in its object: the offset of the __slots__ field (a member
 * descriptor of type T_OBJECT_EX) of its class, found once by setup(). The fields are read
 * and written there directly, as a member descriptor reads and writes them: a few
 * instructions instead of an attribute lookup through the type (~150). Only objects of
 * exactly those classes (an index: of the index base class or a subclass) are taken. */
static Py_ssize_t o_leo, o_hw, o_last_append_time_ms, o_recovery_point, o_append_limits, o_segments,
    o_producer_state, o_log_start_offset, o_size, o_bytes_since, o_index_interval_bytes, o_base_offset, o_rolling_ts,
    o_roll_jitter_ms, o_created_ms, o_offset_index, o_time_index, o_file, o_max_ts, o_max_ts_offset, o_entries,
    o_max_entries, o_fd, o_recent, o_closed, o_rules, o_epochs;

#define SLOT(obj, off) (*(PyObject **)((char *)(obj) + (off)))

/* obj's field at ``off`` = v (a new reference, stolen; -1 when NULL, with the error set) */
static int set_slot(PyObject *obj, Py_ssize_t off, PyObject *v) {
    if (!v)
        return -1;
    PyObject *old = SLOT(obj, off);
    SLOT(obj, off) = v;
    Py_XDECREF(old);
    return 0;
}

/* an int (NULL: an unset field) as a long long; -1 when it is not an int or not within 64
 * bits (any error cleared: the caller falls back) */
static int to_ll(PyObject *o, long long *out) {
    if (!o || !PyLong_Check(o))
        return -1;
    long long v = pyint_as_ll(o);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = v;
    return 0;
}

static inline int slot_ll(PyObject *obj, Py_ssize_t off, long long *out) { return to_ll(SLOT(obj, off), out); }

/* whether the index in seg's field ``off`` has ``reserve`` or fewer free slots:
 * OffsetIndex.is_full (reserve 0), TimeIndex.is_full (reserve 1: a slot is kept for the
 * entry written on roll); -1 when it is not an index */
static int index_full(PyObject *seg, Py_ssize_t off, long long reserve) {
    PyObject *idx = SLOT(seg, off);
    long long entries, max_entries;
    if (!idx || !PyObject_TypeCheck(idx, (PyTypeObject *)index_type) || slot_ll(idx, o_entries, &entries) < 0
        || slot_ll(idx, o_max_entries, &max_entries) < 0)
        return -1;
    return entries >= max_entries - reserve;
}

/* the offset of cls's __slots__ field ``name``; -1 with an exception set */
static int slot_offset(PyObject *cls, const char *name, Py_ssize_t *out) {
    PyObject *d = PyObject_GetAttrString(cls, name);
    if (!d)
        return -1;
    if (!Py_IS_TYPE(d, &PyMemberDescr_Type) || ((PyMemberDescrObject *)d)->d_member->type != T_OBJECT_EX) {
        PyErr_Format(PyExc_TypeError, "%s.%s is not a __slots__ field", ((PyTypeObject *)cls)->tp_name, name);
        Py_DECREF(d);
        return -1;
    }
    *out = ((PyMemberDescrObject *)d)->d_member->offset;
    Py_DECREF(d);
    return 0;
}

static PyObject *ap_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7 || !PyType_Check(args[0]) || !PyType_IsSubtype((PyTypeObject *)args[0], &PyTuple_Type)
        || !PyType_Check(args[1]) || !PyType_Check(args[2]) || !PyType_Check(args[3]) || !PyType_Check(args[4])) {
        PyErr_SetString(PyExc_TypeError, "setup(append_info_type, log_type, segment_type, index_type, file_type, "
                                         "unknown, validate): a tuple subclass and four classes first");
        return NULL;
    }
    PyObject *log_cls = args[1], *seg_cls = args[2], *idx_cls = args[3], *file_cls = args[4];
    struct {
        PyObject *cls;
        const char *name;
        Py_ssize_t *off;
    } fields[] = {
        {log_cls, "_leo", &o_leo},
        {log_cls, "_hw", &o_hw},
        {log_cls, "_last_append_time_ms", &o_last_append_time_ms},
        {log_cls, "recovery_point", &o_recovery_point},
        {log_cls, "_append_limits", &o_append_limits},
        {log_cls, "_segments", &o_segments},
        {log_cls, "_producer_state", &o_producer_state},
        {log_cls, "_log_start_offset", &o_log_start_offset},
        {log_cls, "_closed", &o_closed},
        {log_cls, "_validation_rules", &o_rules},
        {log_cls, "_epochs", &o_epochs},
        {seg_cls, "_size", &o_size},
        {seg_cls, "_bytes_since_last_index_entry", &o_bytes_since},
        {seg_cls, "index_interval_bytes", &o_index_interval_bytes},
        {seg_cls, "base_offset", &o_base_offset},
        {seg_cls, "_rolling_ts", &o_rolling_ts},
        {seg_cls, "roll_jitter_ms", &o_roll_jitter_ms},
        {seg_cls, "created_ms", &o_created_ms},
        {seg_cls, "offset_index", &o_offset_index},
        {seg_cls, "time_index", &o_time_index},
        {seg_cls, "_file", &o_file},
        {seg_cls, "_max_ts", &o_max_ts},
        {seg_cls, "_max_ts_offset", &o_max_ts_offset},
        {idx_cls, "entries", &o_entries},
        {idx_cls, "max_entries", &o_max_entries},
        {file_cls, "fd", &o_fd},
        {file_cls, "_recent", &o_recent},
    };
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (slot_offset(fields[i].cls, fields[i].name, fields[i].off) < 0)
            return NULL;
    Py_XSETREF(append_info_type, Py_NewRef(args[0]));
    Py_XSETREF(log_type, Py_NewRef(log_cls));
    Py_XSETREF(segment_type, Py_NewRef(seg_cls));
    Py_XSETREF(index_type, Py_NewRef(idx_cls));
    Py_XSETREF(file_type, Py_NewRef(file_cls));
    Py_XSETREF(unknown_ts, Py_NewRef(args[5]));
    Py_XSETREF(validate_fn, Py_NewRef(args[6]));
    Py_RETURN_NONE;
}

/* The checks, each a case the Python path takes instead, in the order of Log._append,
 * Log._write and LogSegment.append_unindexed; then the write and the state. */
static PyObject *ap_append_one(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 && nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append_one(log, va, now_ms, producer_checked=False)");
        return NULL;
    }
    int producer_checked = nargs == 4 ? PyObject_IsTrue(args[3]) : 0;
    if (producer_checked < 0)
        return NULL;
    if (!append_info_type) {
        PyErr_SetString(PyExc_RuntimeError, "storage._append.setup() was not called");
        return NULL;
    }
    PyObject *log = args[0], *va = args[1];
    long long now_ms;
    if ((PyObject *)Py_TYPE(log) != log_type || to_ll(args[2], &now_ms) < 0 || !PyTuple_Check(va)
        || PyTuple_GET_SIZE(va) != 8)
        Py_RETURN_NONE;
    /* ValidatedAppend: buffer, base_offset, last_offset, max_timestamp,
     * offset_of_max_timestamp, log_append_time, record_count, batches */
    PyObject *buf = PyTuple_GET_ITEM(va, 0), *base_obj = PyTuple_GET_ITEM(va, 1), *last_obj = PyTuple_GET_ITEM(va, 2),
             *max_ts_obj = PyTuple_GET_ITEM(va, 3), *lat_obj = PyTuple_GET_ITEM(va, 5),
             *count_obj = PyTuple_GET_ITEM(va, 6), *batches = PyTuple_GET_ITEM(va, 7);
    long long base_offset, last_offset, max_ts, record_count, position, lat = -1;
    /* one batch (a BatchInfo: position, size, ...) */
    PyObject *batch;
    if (PyList_Check(batches) && PyList_GET_SIZE(batches) == 1)
        batch = PyList_GET_ITEM(batches, 0);
    else if (PyTuple_Check(batches) && PyTuple_GET_SIZE(batches) == 1)
        batch = PyTuple_GET_ITEM(batches, 0);
    else
        Py_RETURN_NONE;
    if (!PyTuple_Check(batch) || PyTuple_GET_SIZE(batch) < 1 || to_ll(PyTuple_GET_ITEM(batch, 0), &position) < 0)
        Py_RETURN_NONE;

    Py_buffer view;
    if (PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    const long long n = view.len;
    /* without a producer id (the int64's first byte has the sign bit: -1) unless the
     * caller checked it; first, so that an idempotent producer's batch goes to the Python
     * path, which checks it, at once */
    if (n == 0 || position < 0 || position + PRODUCER_ID_OFFSET >= n
        || (!producer_checked && ((const unsigned char *)view.buf)[position + PRODUCER_ID_OFFSET] < 0x80))
        goto not_this_case;
    if (to_ll(base_obj, &base_offset) < 0 || to_ll(last_obj, &last_offset) < 0 || to_ll(max_ts_obj, &max_ts) < 0
        || to_ll(count_obj, &record_count) < 0 || record_count == 0 || (lat_obj != Py_None && to_ll(lat_obj, &lat) < 0))
        goto not_this_case;

    /* the log's state */
    long long leo, segment_bytes, segment_ms, flush_messages;
    PyObject *limits = SLOT(log, o_append_limits), *segments = SLOT(log, o_segments);
    if (slot_ll(log, o_leo, &leo) < 0 || base_offset != leo || !limits || !PyTuple_Check(limits)
        || PyTuple_GET_SIZE(limits) != 3 || to_ll(PyTuple_GET_ITEM(limits, 0), &segment_bytes) < 0
        || to_ll(PyTuple_GET_ITEM(limits, 1), &segment_ms) < 0
        || to_ll(PyTuple_GET_ITEM(limits, 2), &flush_messages) < 0 || !segments || !PyList_Check(segments)
        || PyList_GET_SIZE(segments) == 0)
        goto not_this_case;
    /* borrowed until the write: nothing before it runs Python code that could drop it */
    PyObject *seg = PyList_GET_ITEM(segments, PyList_GET_SIZE(segments) - 1);
    if ((PyObject *)Py_TYPE(seg) != segment_type)
        goto not_this_case;

    /* LogSegment.append_unindexed's case */
    long long current, since_index, interval, seg_base;
    if (n > segment_bytes || slot_ll(seg, o_size, &current) < 0 || current > segment_bytes - n
        || slot_ll(seg, o_bytes_since, &since_index) < 0
        || slot_ll(seg, o_index_interval_bytes, &interval) < 0
        || slot_ll(seg, o_base_offset, &seg_base) < 0 || last_offset - seg_base < 0
        || last_offset - seg_base > REL_OFFSET_MAX)
        goto not_this_case;
    /* index.interval.bytes passed: the batch gets an offset and a time index entry, made
     * by LogSegment._index_entry after the write (neither index full: checked below) */
    int index_due = since_index > interval;
    if (index_due && !current)
        goto not_this_case;
    if (current) {
        PyObject *ts_obj = SLOT(seg, o_rolling_ts);
        long long ts, waited, created, jitter;
        if (!ts_obj || ts_obj == unknown_ts || ts_obj == Py_None || to_ll(ts_obj, &ts) < 0)
            goto not_this_case;
        if (ts >= 0)
            waited = max_ts - ts;
        else if (slot_ll(seg, o_created_ms, &created) < 0)
            goto not_this_case;
        else
            waited = now_ms - created;
        if (slot_ll(seg, o_roll_jitter_ms, &jitter) < 0 || waited > segment_ms - jitter
            || index_full(seg, o_offset_index, 0) != 0 || index_full(seg, o_time_index, 1) != 0)
            goto not_this_case;
    }
    long long fd, seg_max_ts;
    PyObject *file = SLOT(seg, o_file);
    if (slot_ll(seg, o_max_ts, &seg_max_ts) < 0 || !file || (PyObject *)Py_TYPE(file) != file_type
        || slot_ll(file, o_fd, &fd) < 0 || fd < 0 || fd > INT_MAX)
        goto not_this_case;

    /* the write: all of it, else nothing changed here (the fallback rewrites it whole) */
    Py_INCREF(seg);
    Py_INCREF(file);
    ssize_t written;
    Py_BEGIN_ALLOW_THREADS
    written = pwrite((int)fd, view.buf, (size_t)n, (off_t)current);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    PyObject *result = NULL;
    if (written != n) {
        result = Py_NewRef(Py_None);
        goto done;
    }

    /* written: the state, as the Python path leaves it (an error here is a bug: raised) */
    /* OPEN_FILES.touch(file): used since the last pass */
    set_slot(file, o_recent, Py_NewRef(Py_True));
    if (current == 0)
        set_slot(seg, o_rolling_ts, Py_NewRef(max_ts_obj));
    if (set_slot(seg, o_size, PyLong_FromLongLong(current + n)) < 0)
        goto done;
    if (max_ts > seg_max_ts) {
        set_slot(seg, o_max_ts, Py_NewRef(max_ts_obj));
        set_slot(seg, o_max_ts_offset, Py_NewRef(last_obj));
    }
    if (index_due) {  /* LogSegment.append's index entries for its one batch */
        PyObject *at = PyLong_FromLongLong(current + position);
        PyObject *made = at ? PyObject_CallMethodObjArgs(seg, s_index_entry, last_obj, at, NULL) : NULL;
        Py_XDECREF(at);
        if (!made)
            goto done;
        Py_DECREF(made);
    }
    if (set_slot(seg, o_bytes_since, PyLong_FromLongLong(index_due ? n : since_index + n)) < 0)
        goto done;
    PyObject *new_leo = PyLong_FromLongLong(last_offset + 1);
    if (!new_leo)
        goto done;
    set_slot(log, o_leo, Py_NewRef(new_leo));
    set_slot(log, o_hw, Py_NewRef(new_leo));
    long long last_lat, recovery_point;
    int rc = 0;
    if (lat >= 0 && (slot_ll(log, o_last_append_time_ms, &last_lat) < 0 || lat > last_lat))
        set_slot(log, o_last_append_time_ms, Py_NewRef(lat_obj));
    if (slot_ll(log, o_recovery_point, &recovery_point) < 0) {
        PyErr_SetString(PyExc_TypeError, "Log.recovery_point is not an int");
        rc = -1;
    } else if (last_offset + 1 - recovery_point >= flush_messages) {
        PyObject *flushed = PyObject_CallMethodNoArgs(log, s_flush);
        rc = flushed ? 0 : -1;
        Py_XDECREF(flushed);
    }
    PyObject *psm = SLOT(log, o_producer_state);
    if (rc == 0)
        rc = psm ? PyObject_SetAttr(psm, s_map_end_offset, new_leo) : -1;
    if (rc == 0 && !psm)
        PyErr_SetString(PyExc_AttributeError, "Log._producer_state");
    Py_DECREF(new_leo);
    PyObject *lso = SLOT(log, o_log_start_offset);
    if (rc < 0 || !lso) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_AttributeError, "Log._log_start_offset");
        goto done;
    }
    /* AppendInfo(base_offset, last_offset, log_append_time, log_start_offset,
     * record_count, max_timestamp, duplicate=False), made in place */
    result = ((PyTypeObject *)append_info_type)->tp_alloc((PyTypeObject *)append_info_type, 7);
    if (!result)
        goto done;
    PyObject *items[7] = {base_obj, last_obj, lat_obj, lso, count_obj, max_ts_obj, Py_False};
    for (int i = 0; i < 7; i++)
        PyTuple_SET_ITEM(result, i, Py_NewRef(items[i]));
done:
    Py_DECREF(seg);
    Py_DECREF(file);
    return result;

not_this_case:
    PyBuffer_Release(&view);
    Py_RETURN_NONE;
}

#define INT32_MAX_SEQ 2147483647LL

/* the n-byte big-endian signed integer at p */
static long long be_signed(const unsigned char *p, int n) {
    unsigned long long v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    if (n < 8 && (v >> (8 * n - 1)) & 1)  /* sign-extended */
        v |= ~0ULL << (8 * n);
    return (long long)v;
}

/* See the top of this file. None when not its case, with nothing changed. */
static PyObject *append_idempotent(PyObject *self, PyObject *log, PyObject *va, PyObject *now_obj) {
    if (!entry_type || !PyTuple_Check(va) || PyTuple_GET_SIZE(va) != 8)
        Py_RETURN_NONE;
    PyObject *batches = PyTuple_GET_ITEM(va, 7), *batch;
    if (PyList_Check(batches) && PyList_GET_SIZE(batches) == 1)
        batch = PyList_GET_ITEM(batches, 0);
    else
        Py_RETURN_NONE;
    long long position, first_offset, last_offset, max_ts, pid, epoch, base_seq;
    if (!PyTuple_Check(batch) || PyTuple_GET_SIZE(batch) < 5 || to_ll(PyTuple_GET_ITEM(batch, 0), &position) < 0
        || to_ll(PyTuple_GET_ITEM(batch, 2), &first_offset) < 0 || to_ll(PyTuple_GET_ITEM(batch, 3), &last_offset) < 0
        || to_ll(PyTuple_GET_ITEM(batch, 4), &max_ts) < 0)
        Py_RETURN_NONE;
    Py_buffer view;
    if (PyObject_GetBuffer(PyTuple_GET_ITEM(va, 0), &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    int ok = position >= 0 && position + 61 <= view.len;
    int transactional = 1;
    if (ok) {
        const unsigned char *h = (const unsigned char *)view.buf + position;
        pid = be_signed(h + PRODUCER_ID_OFFSET, 8);
        epoch = be_signed(h + PRODUCER_EPOCH_OFFSET, 2);
        base_seq = be_signed(h + BASE_SEQUENCE_OFFSET, 4);
        transactional = (h[ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_BIT) != 0;
    }
    PyBuffer_Release(&view);
    if (!ok || transactional || pid < 0 || base_seq < 0)
        Py_RETURN_NONE;
    long long new_last = base_seq + (last_offset - first_offset);
    if (last_offset < first_offset || new_last > INT32_MAX_SEQ)
        Py_RETURN_NONE;  /* a sequence that wraps: Log._append */

    PyObject *psm = Py_XNewRef(SLOT(log, o_producer_state)), *producers = NULL, *key = NULL, *entry = NULL,
             *deque = NULL, *cur_epoch = NULL, *txn = NULL, *last = NULL, *info = NULL, *meta = NULL;
    PyObject *result = NULL;
    long long v, n;
    if (!psm || !(producers = PyObject_GetAttr(psm, s_producers)) || !PyDict_Check(producers)
        || !(key = PyLong_FromLongLong(pid)))
        goto not_ours;
    entry = Py_XNewRef(PyDict_GetItemWithError(producers, key));
    if (!entry || (PyObject *)Py_TYPE(entry) != entry_type)
        goto not_ours;
    if (!(cur_epoch = PyObject_GetAttr(entry, s_producer_epoch)) || to_ll(cur_epoch, &v) < 0 || v != epoch
        || !(txn = PyObject_GetAttr(entry, s_current_txn_first_offset)) || to_ll(txn, &v) < 0 || v >= 0
        || !(deque = PyObject_GetAttr(entry, s_batches)) || (n = PyObject_Length(deque)) <= 0)
        goto not_ours;
    /* the last batch's last sequence, and none of the last batches the same again */
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *b = PySequence_GetItem(deque, i);
        long long last_seq, delta;
        int good = b && PyTuple_Check(b) && PyTuple_GET_SIZE(b) >= 3 && to_ll(PyTuple_GET_ITEM(b, 0), &last_seq) == 0
                   && to_ll(PyTuple_GET_ITEM(b, 2), &delta) == 0;
        long long first_seq = good ? (last_seq < delta ? INT32_MAX_SEQ - (delta - last_seq) + 1 : last_seq - delta) : 0;
        Py_XDECREF(b);
        if (!good || (last_seq == new_last && first_seq == base_seq))
            goto not_ours;  /* a duplicate (or not a BatchMetadata): Log._append answers it */
        if (i == n - 1 && base_seq != last_seq + 1)
            goto not_ours;  /* out of sequence: Log._append raises */
    }
    PyObject *aargs[4] = {log, va, now_obj, Py_True};
    if (!(info = ap_append_one(self, aargs, 4)))
        goto done;
    if (info == Py_None)
        goto not_ours;  /* nothing written */
    /* apply_one: the batch added to the producer's last ones, its timestamp the last */
    PyObject *fields = Py_BuildValue("(LLLL)", new_last, last_offset, last_offset - first_offset, max_ts);
    if (!fields)
        goto done;
    meta = PyObject_CallOneArg(new_batch_metadata, fields);
    Py_DECREF(fields);
    PyObject *max_ts_obj;
    if (!meta || !(last = PyObject_CallMethodOneArg(deque, s_append_name, meta))
        || !(max_ts_obj = PyLong_FromLongLong(max_ts)))
        goto done;
    int set = PyObject_SetAttr(entry, s_last_timestamp, max_ts_obj);
    Py_DECREF(max_ts_obj);
    if (set < 0)
        goto done;
    result = Py_NewRef(info);
    goto done;
not_ours:
    if (PyErr_Occurred())
        PyErr_Clear();
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(psm);
    Py_XDECREF(producers);
    Py_XDECREF(key);
    Py_XDECREF(entry);
    Py_XDECREF(deque);
    Py_XDECREF(cur_epoch);
    Py_XDECREF(txn);
    Py_XDECREF(last);
    Py_XDECREF(info);
    Py_XDECREF(meta);
    return result;
}

static PyObject *ap_setup_producers(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "setup_producers(entry_type, new_batch_metadata)");
        return NULL;
    }
    Py_XSETREF(entry_type, Py_NewRef(args[0]));
    Py_XSETREF(new_batch_metadata, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* Log.append_produced: validate_common with the log's fields, then append_one, else
 * Log._append (the log's fields held while the calls run Python code) */
static PyObject *ap_append_produced(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "append_produced(log, records, now_ms, max_batches)");
        return NULL;
    }
    if (!validate_fn) {
        PyErr_SetString(PyExc_RuntimeError, "storage._append.setup() was not called");
        return NULL;
    }
    PyObject *log = args[0], *now_obj = args[2];
    if ((PyObject *)Py_TYPE(log) != log_type || SLOT(log, o_closed) != Py_False)
        Py_RETURN_NONE;  /* closed (or a field unset) */
    PyObject *rules = Py_XNewRef(SLOT(log, o_rules)), *leo = Py_XNewRef(SLOT(log, o_leo)),
             *lat = Py_XNewRef(SLOT(log, o_last_append_time_ms)), *epochs = Py_XNewRef(SLOT(log, o_epochs)),
             *epoch = NULL, *va = NULL, *info = NULL;
    Py_INCREF(log);
    if (!rules || !leo || !lat || !epochs) {
        info = Py_NewRef(Py_None);
        goto done;
    }
    if (!(epoch = PyObject_GetAttr(epochs, s_latest_epoch)))
        goto done;
    PyObject *vargs[7] = {args[1], rules, now_obj, leo, lat, epoch, args[3]};
    if (!(va = PyObject_Vectorcall(validate_fn, vargs, 7, NULL)))
        goto done;
    if (va == Py_None) {
        info = Py_NewRef(Py_None);
        goto done;
    }
    PyObject *aargs[3] = {log, va, now_obj};
    info = ap_append_one(self, aargs, 3);
    if (info == Py_None) {  /* not append_one's case: an idempotent producer's next batch? */
        Py_DECREF(info);
        info = append_idempotent(self, log, va, now_obj);
    }
    if (info == Py_None) {  /* neither's case */
        Py_DECREF(info);
        PyObject *margs[4] = {log, va, now_obj, Py_False};
        info = PyObject_VectorcallMethod(s_append, margs, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
    }
done:
    Py_XDECREF(va);
    Py_XDECREF(epoch);
    Py_XDECREF(epochs);
    Py_XDECREF(lat);
    Py_XDECREF(leo);
    Py_XDECREF(rules);
    Py_DECREF(log);
    return info;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))ap_setup, METH_FASTCALL,
     "setup(append_info_type, log_type, segment_type, index_type, file_type, unknown, validate): the classes "
     "whose fields append_one reads and writes, what it returns and the validation append_produced calls"},
    {"append_one", (PyCFunction)(void (*)(void))ap_append_one, METH_FASTCALL,
     "append_one(log, va, now_ms, producer_checked=False) -> AppendInfo | None: Log._append's common one-batch "
     "case"},
    {"setup_producers", (PyCFunction)(void (*)(void))ap_setup_producers, METH_FASTCALL,
     "setup_producers(entry_type, new_batch_metadata): what append_produced's idempotent case makes and reads"},
    {"append_produced", (PyCFunction)(void (*)(void))ap_append_produced, METH_FASTCALL,
     "append_produced(log, records, now_ms, max_batches) -> AppendInfo | None: Log.append_produced"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_append", NULL, -1, methods};

PyMODINIT_FUNC PyInit__append(void) {
    if (!(s_flush = PyUnicode_InternFromString("flush"))
        || !(s_map_end_offset = PyUnicode_InternFromString("map_end_offset"))
        || !(s_producers = PyUnicode_InternFromString("producers"))
        || !(s_index_entry = PyUnicode_InternFromString("_index_entry"))
        || !(s_producer_epoch = PyUnicode_InternFromString("producer_epoch"))
        || !(s_batches = PyUnicode_InternFromString("batches"))
        || !(s_current_txn_first_offset = PyUnicode_InternFromString("current_txn_first_offset"))
        || !(s_last_timestamp = PyUnicode_InternFromString("last_timestamp"))
        || !(s_append_name = PyUnicode_InternFromString("append"))
        || !(s_latest_epoch = PyUnicode_InternFromString("latest_epoch"))
        || !(s_append = PyUnicode_InternFromString("_append")))
        return NULL;
    return PyModule_Create(&module);
}
