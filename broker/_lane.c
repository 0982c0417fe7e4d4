/* broker/_lane.c - the connection's compiled lane: consecutive Produce frames in a
 * connection's receive buffer answered without a Python frame per request.
 *
 * For each frame it takes, it makes the calls broker/connection.py's _process_frames and
 * broker/dispatcher.py's dispatch make for a Produce v3+ request of a plain connection,
 * in the same order, each through the callable they use: the codec's compiled decode
 * (protocol/_fastwire.c, with codec.REQUEST_TABLE), the clock, the produce handler's
 * compiled handle (broker/_produce.c), the codec's compiled encode (or codec's own
 * encode_response for a pair it has not met) and the metrics' request_done hook. Owns
 * no format and no rule of its own: it reads a frame's size, API key and version to know
 * whether the frame is its case, as _process_frames and dispatch read them.
 *
 * It stops, and returns where, at the first frame that is not its case: an incomplete
 * frame, a size the connection refuses, another API or version, a frame the compiled
 * decode does not take (whole, or its body), or after more than ``coalesce`` chunks
 * gathered (the connection writes them, then calls it again). The Python path takes
 * that frame and names any problem.
 * Whether a connection may use it at all (no authorizer, a complete session that never
 * expires, no client quota enforced, no memory reserved) is the dispatcher's and the
 * connection's to decide (Dispatcher.lane_for).
 *
 *   Lane(decode, request_table, common, not_common, logs, waiters, notify, clock_ms,
 *        produced, request_done, encode, response_table, encode_python, min_version,
 *        max_version, max_frame, coalesce)
 *       ``clock_ms``: the broker clock's time_ms, or None for storage.clock's SystemClock
 *       (storage.clock.reads_system_time), whose reading this makes itself
 *   lane(view, start, end, out, writable) -> int | (after, header, request, outcome, now_ms, tally, started)
 *       ``view``: the connection's receive buffer (a memoryview of bytes), frames from
 *       ``start`` to ``end``; each answered frame's chunks are appended to ``out``.
 *       ``writable``: the compiled handle's (None, or the set of topics the authorizer
 *       allowed the connection to write).
 *       Returns the position after the last frame it answered (``start`` if none).
 *       A frame it began but whose handling the Python path finishes comes back as a
 *       tuple: the position after it, its header and request, and the outcome - the
 *       compiled handle's ``not_common`` (nothing done), its (position, items, results,
 *       exception) (stopped in the middle), or an exception raised on the way (the
 *       request failed) - with the append time, the metrics' tally and the
 *       perf_counter() time it started at (Dispatcher.lane_rest finishes it).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <time.h>
#include "_slots.h"
#include "_exc.h"
#include "../protocol/_mvslice.h"

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *decode, *request_table, *common, *not_common, *logs, *waiters, *notify, *clock_ms, *produced,
        *request_done, *encode, *response_table, *encode_python;
    long min_version, max_version;
    Py_ssize_t max_frame, coalesce;
} Lane;

static PyObject *zero, *s_correlation_id;

/* what time.perf_counter() reads (CLOCK_MONOTONIC on Linux), in seconds */
static double perf_counter(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* what storage.clock.SystemClock().time_ms() reads: time.time_ns() // 1_000_000, the
 * CLOCK_REALTIME of time.time_ns() */
static PyObject *realtime_ms(void) {
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    return PyLong_FromLongLong((long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static inline long be32(const unsigned char *p) {
    return (long)(int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]);
}

static inline long be16(const unsigned char *p) {
    return (long)(int16_t)((uint16_t)p[0] << 8 | p[1]);
}

/* the frame's handling left to the Python path: (after, header, request, outcome, now,
 * tally, started); ``outcome`` NULL: the exception set now */
static PyObject *left(Py_ssize_t after, PyObject *header, PyObject *request, PyObject *outcome, PyObject *now,
                      PyObject *tally, double started) {
    PyObject *exc = NULL;
    if (!outcome) {
        exc = take_exception();
        if (!exc)
            return NULL;
        outcome = exc;
    }
    PyObject *at = PyLong_FromSsize_t(after), *t = PyFloat_FromDouble(started), *r = NULL;
    if (at && t)
        r = PyTuple_Pack(7, at, header, request, outcome, now ? now : Py_None, tally ? tally : Py_None, t);
    Py_XDECREF(at);
    Py_XDECREF(t);
    Py_XDECREF(exc);
    return r;
}

/* request_done(0, answer, seconds since started); -1 with an error set */
static int done(Lane *lane, PyObject *answer, double started) {
    if (lane->request_done == Py_None)
        return 0;
    PyObject *elapsed = PyFloat_FromDouble(perf_counter() - started);
    if (!elapsed)
        return -1;
    PyObject *args[3] = {zero, answer, elapsed};
    PyObject *r = PyObject_Vectorcall(lane->request_done, args, 3, NULL);
    Py_DECREF(elapsed);
    if (!r)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* the answer's chunks appended to out; -1 with an error set */
static int answer_into(Lane *lane, PyObject *header, long version, PyObject *answer, PyObject *out) {
    PyObject *correlation_id = SLOT_GET(header, s_correlation_id), *v = PyLong_FromLong(version), *chunks = NULL;
    int ok = 0;
    if (correlation_id && v) {
        PyObject *args[5] = {lane->response_table, zero, v, correlation_id, answer};
        chunks = PyObject_Vectorcall(lane->encode, args, 5, NULL);
        if (chunks == Py_None) {  /* a pair the codec has not met: its own encode_response */
            Py_DECREF(chunks);
            chunks = PyObject_Vectorcall(lane->encode_python, args + 1, 4, NULL);
        }
        if (chunks && PyList_Check(chunks)) {
            Py_ssize_t n = PyList_GET_SIZE(out);
            ok = PyList_SetSlice(out, n, n, chunks) == 0;
        } else if (chunks) {
            PyErr_SetString(PyExc_TypeError, "a response encodes as a list of chunks");
        }
    }
    Py_XDECREF(correlation_id);
    Py_XDECREF(v);
    Py_XDECREF(chunks);
    return ok ? 0 : -1;
}

static PyObject *lane_serve(Lane *lane, PyObject *const *args, size_t nargsf) {
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (nargs != 5 || !PyMemoryView_Check(args[0]) || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "lane(view, start, end, out, writable): view a memoryview, out a list");
        return NULL;
    }
    PyObject *view = args[0], *out = args[3], *writable = args[4];
    Py_ssize_t start = PyLong_AsSsize_t(args[1]), end = PyLong_AsSsize_t(args[2]);
    if ((start == -1 || end == -1) && PyErr_Occurred())
        return NULL;
    Py_buffer *b = PyMemoryView_GET_BUFFER(view);
    if (b->ndim != 1 || b->itemsize != 1 || !PyBuffer_IsContiguous(b, 'C') || start < 0 || start > end
        || end > b->len) {
        PyErr_SetString(PyExc_ValueError, "lane: a contiguous byte buffer and 0 <= start <= end <= its length");
        return NULL;
    }
    const unsigned char *buf = b->buf;
    const Py_ssize_t first = start;
    while (PyList_GET_SIZE(out) <= lane->coalesce && end - start >= 8) {
        long size = be32(buf + start);
        if (size < 4 || size > lane->max_frame || end - start - 4 < size)
            break;
        long api_key = be16(buf + start + 4), version = be16(buf + start + 6);
        if (api_key != 0 || version < lane->min_version || version > lane->max_version)
            break;
        Py_ssize_t after = start + 4 + size;
        PyObject *frame = mv_slice(view, start + 4, after), *decoded = NULL;
        if (frame) {
            PyObject *dargs[2] = {lane->request_table, frame};
            decoded = PyObject_Vectorcall(lane->decode, dargs, 2, NULL);
            Py_DECREF(frame);
        }
        if (!decoded) {
            if (start == first)
                return NULL;
            /* the frames before are answered: their position goes back, and this error
             * comes again when the next call begins with this frame */
            PyErr_Clear();
            break;
        }
        /* None, or a header without its request (a body the compiled decode does not
         * take): the Python path's, which names the problem */
        if (!PyTuple_Check(decoded) || PyTuple_GET_SIZE(decoded) != 3 || PyTuple_GET_ITEM(decoded, 2) == Py_None) {
            Py_DECREF(decoded);
            break;
        }
        PyObject *header = PyTuple_GET_ITEM(decoded, 0), *request = PyTuple_GET_ITEM(decoded, 2), *result;
        double started = perf_counter();
        PyObject *now = lane->clock_ms == Py_None ? realtime_ms() : PyObject_CallNoArgs(lane->clock_ms),
                 *tally = NULL, *answer = NULL;
        if (!now || (lane->produced != Py_None && !(tally = PyDict_New()))) {
            result = left(after, header, request, NULL, now, tally, started);
            goto leave;
        }
        PyObject *hargs[7] = {request, lane->logs, now, tally ? tally : Py_None,
                              PyDict_GET_SIZE(lane->waiters) ? lane->notify : Py_None, lane->produced, writable};
        answer = PyObject_Vectorcall(lane->common, hargs, 7, NULL);
        if (!answer || answer == lane->not_common || PyTuple_Check(answer)) {
            result = left(after, header, request, answer, now, tally, started);
            goto leave;
        }
        if ((answer != Py_None && answer_into(lane, header, version, answer, out) < 0) || done(lane, answer, started) < 0) {
            result = left(after, header, request, NULL, now, tally, started);
            goto leave;
        }
        start = after;
        Py_DECREF(answer);
        Py_DECREF(now);
        Py_XDECREF(tally);
        Py_DECREF(decoded);
        continue;
    leave:
        Py_XDECREF(answer);
        Py_XDECREF(now);
        Py_XDECREF(tally);
        Py_DECREF(decoded);
        return result;
    }
    return PyLong_FromSsize_t(start);
}

static PyObject *lane_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"decode", "request_table", "common", "not_common", "logs", "waiters", "notify",
                            "clock_ms", "produced", "request_done", "encode", "response_table", "encode_python",
                            "min_version", "max_version", "max_frame", "coalesce", NULL};
    PyObject *o[13];
    long min_version, max_version;
    Py_ssize_t max_frame, coalesce;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOO!O!OOOOOO!Ollnn:Lane", names, &o[0], &PyDict_Type, &o[1],
                                     &o[2], &o[3], &PyDict_Type, &o[4], &PyDict_Type, &o[5], &o[6], &o[7], &o[8],
                                     &o[9], &o[10], &PyDict_Type, &o[11], &o[12], &min_version, &max_version,
                                     &max_frame, &coalesce))
        return NULL;
    Lane *lane = (Lane *)type->tp_alloc(type, 0);
    if (!lane)
        return NULL;
    PyObject **fields[13] = {&lane->decode, &lane->request_table, &lane->common, &lane->not_common, &lane->logs,
                             &lane->waiters, &lane->notify, &lane->clock_ms, &lane->produced, &lane->request_done,
                             &lane->encode, &lane->response_table, &lane->encode_python};
    for (int i = 0; i < 13; i++)
        *fields[i] = Py_NewRef(o[i]);
    lane->min_version = min_version;
    lane->max_version = max_version;
    lane->max_frame = max_frame;
    lane->coalesce = coalesce;
    lane->vectorcall = (vectorcallfunc)lane_serve;
    return (PyObject *)lane;
}

static int lane_traverse(Lane *lane, visitproc visit, void *arg) {
    Py_VISIT(lane->decode);
    Py_VISIT(lane->request_table);
    Py_VISIT(lane->common);
    Py_VISIT(lane->not_common);
    Py_VISIT(lane->logs);
    Py_VISIT(lane->waiters);
    Py_VISIT(lane->notify);
    Py_VISIT(lane->clock_ms);
    Py_VISIT(lane->produced);
    Py_VISIT(lane->request_done);
    Py_VISIT(lane->encode);
    Py_VISIT(lane->response_table);
    Py_VISIT(lane->encode_python);
    return 0;
}

static int lane_clear(Lane *lane) {
    Py_CLEAR(lane->decode);
    Py_CLEAR(lane->request_table);
    Py_CLEAR(lane->common);
    Py_CLEAR(lane->not_common);
    Py_CLEAR(lane->logs);
    Py_CLEAR(lane->waiters);
    Py_CLEAR(lane->notify);
    Py_CLEAR(lane->clock_ms);
    Py_CLEAR(lane->produced);
    Py_CLEAR(lane->request_done);
    Py_CLEAR(lane->encode);
    Py_CLEAR(lane->response_table);
    Py_CLEAR(lane->encode_python);
    return 0;
}

static void lane_dealloc(Lane *lane) {
    PyObject_GC_UnTrack(lane);
    lane_clear(lane);
    Py_TYPE(lane)->tp_free((PyObject *)lane);
}

static PyTypeObject LaneType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._lane.Lane",
    .tp_basicsize = sizeof(Lane),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = "Lane(decode, request_table, common, not_common, logs, waiters, notify, clock_ms, produced, "
              "request_done, encode, response_table, encode_python, min_version, max_version, max_frame, coalesce)"
              "\n\nlane(view, start, end, out, writable) -> int | (after, header, request, outcome, now_ms, tally, "
              "started): consecutive Produce frames of a connection's buffer answered (see broker/_lane.c)",
    .tp_new = lane_new,
    .tp_traverse = (traverseproc)lane_traverse,
    .tp_clear = (inquiry)lane_clear,
    .tp_dealloc = (destructor)lane_dealloc,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(Lane, vectorcall),
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_lane", NULL, -1, NULL};

PyMODINIT_FUNC PyInit__lane(void) {
    if (PyType_Ready(&LaneType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    zero = PyLong_FromLong(0);
    s_correlation_id = PyUnicode_InternFromString("correlation_id");
    if (!zero || !s_correlation_id || PyModule_AddObjectRef(m, "Lane", (PyObject *)&LaneType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
