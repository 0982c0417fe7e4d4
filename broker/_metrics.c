/* broker/_metrics.c - the two metric updates every produce request makes, compiled:
 * BrokerMetrics.request_done (every request: its API's count, latency and error codes)
 * and BrokerMetrics.produced (every Produce request: requests, failures, bytes and
 * messages in and append delays per topic). In Python they were a sixth of a one-record
 * produce request's instructions.
 *
 * Owns no metric and no rule of its own. The metrics, their labelled children and the
 * Python methods are broker/metrics.py's; each hook here is that method's body, made for a
 * BrokerMetrics by it, holding the dicts of children it caches and its methods that make a
 * missing child. It updates the children's slots as the Python code does (``value``;
 * ``counts``, ``sum``: the same int and float arithmetic) and calls back into Python for
 * anything else: a child not made yet, a response's error-code walk, a delay past the
 * ms table (observe_ms). The Python methods stay the reference and the fallback; the
 * tests run the same calls through both and compare every exposed sample.
 *
 *   setup(counter_cls, histogram_cls)
 *       once, from broker.metrics at import: where the children's slots are
 *   request_done_hook(api_children, make_api, walk_plans, walk_plan_of, count_errors)
 *       -> request_done(api_key, response, seconds); the response's error codes found by
 *       walk() below, over the plan of its class (walk_plans: {class: plan}, walk_plan_of
 *       makes a missing one)
 *   walk(plan, response, codes)
 *       every non-zero error_code in the response appended to the list ``codes``, as the
 *       walk metrics.py compiles for its class finds them. A plan, made from the class's
 *       schema by metrics._walk_plan: (has_error_code, ((attr, is_array, plan), ...)),
 *       the fields holding structs with an error code somewhere below, in field order
 *   produced_hook(topic_children, delay_children, topic_if_exists, make_topic, make_delay)
 *       -> produced(responses, tally)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "_slots.h"
#include <structmember.h>

static PyTypeObject *counter_type, *histogram_type;
/* slot offsets in those classes' instances (-1: read and written by name) */
static Py_ssize_t value_off = -1, counts_off = -1, sum_off = -1, bounds_off = -1, ms_buckets_off = -1;
static PyObject *s_value, *s_counts, *s_sum, *s_bounds, *s_ms_buckets, *s_observe_ms, *s_name,
    *s_partition_responses, *s_error_code, *one, *thousand;

/* obj.name (new reference): the slot itself for an instance of ``type`` */
static PyObject *get(PyObject *obj, PyTypeObject *type, Py_ssize_t off, PyObject *name) {
    if (off >= 0 && Py_IS_TYPE(obj, type)) {
        PyObject *v = *(PyObject **)((char *)obj + off);
        if (v)
            return Py_NewRef(v);
    }
    return PyObject_GetAttr(obj, name);
}

/* obj.name = v (v a new reference, stolen; NULL: an error already set) */
static int set(PyObject *obj, PyTypeObject *type, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (!v)
        return -1;
    if (off >= 0 && Py_IS_TYPE(obj, type)) {
        Py_XSETREF(*(PyObject **)((char *)obj + off), v);
        return 0;
    }
    int r = PyObject_SetAttr(obj, name, v);
    Py_DECREF(v);
    return r;
}

/* obj.name += v (v stolen) */
static int add(PyObject *obj, PyTypeObject *type, Py_ssize_t off, PyObject *name, PyObject *v) {
    if (!v)
        return -1;
    PyObject *old = get(obj, type, off, name);
    if (!old) {
        Py_DECREF(v);
        return -1;
    }
    PyObject *sum = PyNumber_InPlaceAdd(old, v);
    Py_DECREF(old);
    Py_DECREF(v);
    return set(obj, type, off, name, sum);
}

/* a counter child's value += v (v stolen) */
static inline int inc(PyObject *child, PyObject *v) { return add(child, counter_type, value_off, s_value, v); }

/* list[i] += 1 */
static int bump(PyObject *list, Py_ssize_t i) {
    if (!PyList_Check(list) || i < 0 || i >= PyList_GET_SIZE(list)) {
        PyErr_SetString(PyExc_IndexError, "a histogram's bucket is not in its counts");
        return -1;
    }
    PyObject *n = PyNumber_Add(PyList_GET_ITEM(list, i), one);
    return n ? PyList_SetItem(list, i, n) : -1;
}

/* hist.counts[bucket] += 1; hist.sum += v (v stolen) */
static int count_in(PyObject *hist, Py_ssize_t bucket, PyObject *v) {
    PyObject *counts = get(hist, histogram_type, counts_off, s_counts);
    int r = counts ? bump(counts, bucket) : -1;
    Py_XDECREF(counts);
    if (r < 0) {
        Py_XDECREF(v);
        return -1;
    }
    return add(hist, histogram_type, sum_off, s_sum, v);
}

/* hist.counts[bisect_left(hist.bounds, value)] += 1; hist.sum += value */
static int observe(PyObject *hist, PyObject *value) {
    PyObject *bounds = get(hist, histogram_type, bounds_off, s_bounds);
    if (!bounds)
        return -1;
    if (!PyTuple_Check(bounds)) {
        Py_DECREF(bounds);
        PyErr_SetString(PyExc_TypeError, "a histogram's bounds are a tuple");
        return -1;
    }
    Py_ssize_t lo = 0, hi = PyTuple_GET_SIZE(bounds);
    while (lo < hi) {  /* bisect_left: the first bound not below value */
        Py_ssize_t mid = (lo + hi) / 2;
        PyObject *b = PyTuple_GET_ITEM(bounds, mid);
        int below = PyFloat_CheckExact(b) && PyFloat_CheckExact(value)
                        ? PyFloat_AS_DOUBLE(b) < PyFloat_AS_DOUBLE(value)
                        : PyObject_RichCompareBool(b, value, Py_LT);
        if (below < 0) {
            Py_DECREF(bounds);
            return -1;
        }
        if (below)
            lo = mid + 1;
        else
            hi = mid;
    }
    Py_DECREF(bounds);
    return count_in(hist, lo, Py_NewRef(value));
}

/* one append delay in ms, as BrokerMetrics.produced observes it: a negative one counted
 * apart, one under the ms table's size through the table, any other by observe_ms */
static int observe_delay(PyObject *hist, PyObject *neg, PyObject *delay) {
    int overflow;
    long long ms = PyLong_AsLongLongAndOverflow(delay, &overflow);
    if (ms == -1 && PyErr_Occurred())
        return -1;
    if (overflow < 0 || (!overflow && ms < 0))  /* (an overflow's ms is -1) */
        return inc(neg, Py_NewRef(one));
    PyObject *table = get(hist, histogram_type, ms_buckets_off, s_ms_buckets);
    if (!table)
        return -1;
    if (overflow || !PyList_Check(table) || ms >= PyList_GET_SIZE(table)) {
        Py_DECREF(table);
        PyObject *r = PyObject_CallMethodOneArg(hist, s_observe_ms, delay);
        Py_XDECREF(r);
        return r ? 0 : -1;
    }
    Py_ssize_t bucket = PyLong_AsSsize_t(PyList_GET_ITEM(table, ms));
    Py_DECREF(table);
    if (bucket == -1 && PyErr_Occurred())
        return -1;
    /* delay / 1000.0: the int made a double, then divided, as Python's true division */
    return count_in(hist, bucket, PyNumber_TrueDivide(delay, thousand));
}

#define MAX_BUCKETS 64

/* what observe_delays kept in C for one histogram: added to its counts and made its sum */
static int flush_delays(PyObject *hist, PyObject *counts, long long *added, Py_ssize_t nb, double sum, int summed) {
    for (Py_ssize_t b = 0; b < nb; b++) {
        if (!added[b])
            continue;
        PyObject *n = PyLong_FromLongLong(added[b]), *v = n ? PyNumber_Add(PyList_GET_ITEM(counts, b), n) : NULL;
        Py_XDECREF(n);
        if (!v || PyList_SetItem(counts, b, v) < 0)
            return -1;
        added[b] = 0;
    }
    return summed ? set(hist, histogram_type, sum_off, s_sum, PyFloat_FromDouble(sum)) : 0;
}

/* a topic's append delays (a PySequence_Fast of ints), observed in turn as observe_delay
 * observes each, the histogram's counts and sum kept in C between them: each bucket's
 * count added once at the end, the sum the same float additions in the same order (the
 * state written back before a delay past the table goes to observe_ms) */
static int observe_delays(PyObject *hist, PyObject *neg, PyObject *delays) {
    PyObject *table = get(hist, histogram_type, ms_buckets_off, s_ms_buckets), *counts = NULL, *sum = NULL;
    int r = -1;
    if (!table || !(counts = get(hist, histogram_type, counts_off, s_counts))
        || !(sum = get(hist, histogram_type, sum_off, s_sum)))
        goto done;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(delays), nb = PyList_Check(counts) ? PyList_GET_SIZE(counts) : 0;
    if (!PyList_Check(table) || !nb || nb > MAX_BUCKETS || !PyFloat_CheckExact(sum)) {  /* one at a time */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(delays); i++) {
            PyObject *d = Py_NewRef(PySequence_Fast_GET_ITEM(delays, i));
            int ok = observe_delay(hist, neg, d);
            Py_DECREF(d);
            if (ok < 0)
                goto done;
        }
        r = 0;
        goto done;
    }
    long long added[MAX_BUCKETS] = {0}, negatives = 0;
    double s = PyFloat_AS_DOUBLE(sum);
    int summed = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(delays, i);
        int overflow;
        long long ms = PyLong_AsLongLongAndOverflow(d, &overflow);
        if (ms == -1 && PyErr_Occurred())
            goto done;
        if (overflow < 0 || (!overflow && ms < 0)) {
            negatives++;
        } else if (overflow || ms >= PyList_GET_SIZE(table)) {  /* observe_ms, on the histogram as it is */
            if (flush_delays(hist, counts, added, nb, s, summed) < 0)
                goto done;
            Py_INCREF(d);
            PyObject *o = PyObject_CallMethodOneArg(hist, s_observe_ms, d);
            Py_DECREF(d);
            if (!o)
                goto done;
            Py_DECREF(o);
            Py_DECREF(sum);
            if (!(sum = get(hist, histogram_type, sum_off, s_sum)))
                goto done;
            if (!PyFloat_CheckExact(sum) || !PyList_Check(counts) || PyList_GET_SIZE(counts) != nb) {
                PyErr_SetString(PyExc_TypeError, "a histogram's sum is a float, its counts a list of its size");
                goto done;
            }
            s = PyFloat_AS_DOUBLE(sum);
            summed = 0;
        } else {
            Py_ssize_t b = PyLong_AsSsize_t(PyList_GET_ITEM(table, ms));
            if (b == -1 && PyErr_Occurred())
                goto done;
            if (b < 0 || b >= nb) {
                PyErr_SetString(PyExc_IndexError, "a histogram's bucket is not in its counts");
                goto done;
            }
            added[b]++;
            s += (double)ms / 1000.0;  /* hist.sum += delay / 1000.0 */
            summed = 1;
        }
    }
    if (flush_delays(hist, counts, added, nb, s, summed) < 0
        || (negatives && inc(neg, PyLong_FromLongLong(negatives)) < 0))
        goto done;
    r = 0;
done:
    Py_XDECREF(table);
    Py_XDECREF(counts);
    Py_XDECREF(sum);
    return r;
}

/* d[key], or make(key) when it is not there (new reference; NULL with an error set) */
static PyObject *get_or_make(PyObject *d, PyObject *key, PyObject *make) {
    PyObject *v = PyDict_GetItemWithError(d, key);
    if (v)
        return Py_NewRef(v);
    if (PyErr_Occurred())
        return NULL;
    return PyObject_CallOneArg(make, key);
}

/* a tuple of at least n items (new reference stays with the caller) */
static int tuple_of(PyObject *t, Py_ssize_t n, const char *what) {
    if (PyTuple_Check(t) && PyTuple_GET_SIZE(t) >= n)
        return 0;
    PyErr_Format(PyExc_TypeError, "%s is a tuple of %zd", what, n);
    return -1;
}

/* ------------------------------------------------------------------------------- walk */
static int walk(PyObject *plan, PyObject *obj, PyObject *codes, int depth) {
    if (depth > 16) {
        PyErr_SetString(PyExc_RecursionError, "error code walk too deep");
        return -1;
    }
    if (!PyTuple_Check(plan) || PyTuple_GET_SIZE(plan) != 2 || !PyTuple_Check(PyTuple_GET_ITEM(plan, 1))) {
        PyErr_SetString(PyExc_TypeError, "a walk plan is (has_error_code, ((attr, is_array, plan), ...))");
        return -1;
    }
    if (PyTuple_GET_ITEM(plan, 0) == Py_True) {
        PyObject *c = SLOT_GET(obj, s_error_code);
        if (!c)
            return -1;
        int set = PyObject_IsTrue(c);
        if (set < 0 || (set && PyList_Append(codes, c) < 0)) {
            Py_DECREF(c);
            return -1;
        }
        Py_DECREF(c);
    }
    PyObject *children = PyTuple_GET_ITEM(plan, 1);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(children); i++) {
        PyObject *child = PyTuple_GET_ITEM(children, i);
        if (!PyTuple_Check(child) || PyTuple_GET_SIZE(child) != 3) {
            PyErr_SetString(PyExc_TypeError, "a walk plan's field is (attr, is_array, plan)");
            return -1;
        }
        /* a slot cache per depth and field: one API's answers keep finding theirs */
        static SlotCache caches[17][4];
        PyObject *sub = PyTuple_GET_ITEM(child, 2),
                 *x = i < 4 ? slot_get(obj, PyTuple_GET_ITEM(child, 0), &caches[depth][i])
                            : PyObject_GetAttr(obj, PyTuple_GET_ITEM(child, 0));
        if (!x)
            return -1;
        int r = 0;
        if (PyTuple_GET_ITEM(child, 1) == Py_True) {  /* for y in x or (): a list read as it is */
            int any = PyObject_IsTrue(x);
            PyObject *seq = any > 0 ? PySequence_Fast(x, "an array field is iterable") : NULL;
            if (any < 0 || (any > 0 && !seq)) {
                r = -1;
            } else if (seq) {
                for (Py_ssize_t j = 0; r == 0 && j < PySequence_Fast_GET_SIZE(seq); j++) {
                    PyObject *y = Py_NewRef(PySequence_Fast_GET_ITEM(seq, j));
                    r = walk(sub, y, codes, depth + 1);
                    Py_DECREF(y);
                }
                Py_DECREF(seq);
            }
        } else if (x != Py_None) {
            r = walk(sub, x, codes, depth + 1);
        }
        Py_DECREF(x);
        if (r < 0)
            return -1;
    }
    return 0;
}

static PyObject *mx_walk(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3 || !PyList_Check(args[2])) {
        PyErr_SetString(PyExc_TypeError, "walk(plan, response, codes): codes a list");
        return NULL;
    }
    if (walk(args[0], args[1], args[2], 0) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------------------- hooks */
enum { REQUEST_DONE, PRODUCED };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    int kind;
    PyObject *state[5];
} Hook;

static PyObject *request_done(Hook *h, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "request_done(api_key, response, seconds)");
        return NULL;
    }
    PyObject *api_children = h->state[0], *make_api = h->state[1], *plans = h->state[2], *plan_of = h->state[3],
             *count_errors = h->state[4], *response = args[1];
    PyObject *c = get_or_make(api_children, args[0], make_api);
    if (!c)
        return NULL;
    PyObject *codes = NULL, *plan = NULL, *r = NULL;
    if (tuple_of(c, 3, "an API's children") < 0 || inc(PyTuple_GET_ITEM(c, 0), Py_NewRef(one)) < 0
        || observe(PyTuple_GET_ITEM(c, 1), args[2]) < 0)
        goto done;
    if (response != Py_None) {
        PyObject *cls = (PyObject *)Py_TYPE(response);
        if (!(plan = get_or_make(plans, cls, plan_of)) || !(codes = PyList_New(0))
            || walk(plan, response, codes, 0) < 0)
            goto done;
        if (PyList_GET_SIZE(codes)) {
            PyObject *e = PyObject_CallFunctionObjArgs(count_errors, PyTuple_GET_ITEM(c, 2), codes, NULL);
            if (!e)
                goto done;
            Py_DECREF(e);
        }
    }
    r = Py_NewRef(Py_None);
done:
    Py_DECREF(c);
    Py_XDECREF(plan);
    Py_XDECREF(codes);
    return r;
}

/* one topic's answer: its produce request counted, and failed when a partition failed */
static int count_topic(PyObject *topic_children, PyObject *topic_if_exists, PyObject *t) {
    PyObject *name = SLOT_GET(t, s_name);
    if (!name)
        return -1;
    PyObject *c = get_or_make(topic_children, name, topic_if_exists);
    Py_DECREF(name);
    if (!c)
        return -1;
    int r = -1;
    if (c == Py_None) {  /* a topic this broker does not have: no series */
        r = 0;
        goto done;
    }
    if (tuple_of(c, 6, "a topic's children") < 0 || inc(PyTuple_GET_ITEM(c, 4), Py_NewRef(one)) < 0)
        goto done;
    PyObject *parts = SLOT_GET(t, s_partition_responses);
    if (!parts)
        goto done;
    PyObject *seq = PySequence_Fast(parts, "partition_responses is iterable");  /* a list: itself */
    Py_DECREF(parts);
    if (!seq)
        goto done;
    int failed = 0;
    for (Py_ssize_t i = 0; !failed && i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *p = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i)), *code = SLOT_GET(p, s_error_code);
        Py_DECREF(p);
        if (!code || (failed = PyObject_IsTrue(code)) < 0) {
            Py_XDECREF(code);
            Py_DECREF(seq);
            goto done;
        }
        Py_DECREF(code);
    }
    Py_DECREF(seq);
    if (failed && inc(PyTuple_GET_ITEM(c, 5), Py_NewRef(one)) < 0)
        goto done;
    r = 0;
done:
    Py_DECREF(c);
    return r;
}

/* one topic's tally [bytes, messages, delays or None] added to its children */
static int count_tally(PyObject *const *st, PyObject *topic, PyObject *tally) {
    PyObject *topic_children = st[0], *delay_children = st[1], *make_topic = st[3], *make_delay = st[4];
    PyObject *v = PySequence_Fast(tally, "a tally is [bytes, messages, delays or None]"), *c = NULL, *hn = NULL,
             *delays = NULL;
    if (!v)
        return -1;
    int r = -1;
    if (PySequence_Fast_GET_SIZE(v) != 3) {
        PyErr_SetString(PyExc_ValueError, "a tally is [bytes, messages, delays or None]");
        goto done;
    }
    if (!(c = get_or_make(topic_children, topic, make_topic)) || tuple_of(c, 6, "a topic's children") < 0
        || inc(PyTuple_GET_ITEM(c, 0), Py_NewRef(PySequence_Fast_GET_ITEM(v, 0))) < 0
        || inc(PyTuple_GET_ITEM(c, 1), Py_NewRef(PySequence_Fast_GET_ITEM(v, 1))) < 0)
        goto done;
    if (PySequence_Fast_GET_ITEM(v, 2) != Py_None) {
        if (!(hn = get_or_make(delay_children, topic, make_delay)) || tuple_of(hn, 2, "a topic's delay children") < 0
            || !(delays = PySequence_Fast(PySequence_Fast_GET_ITEM(v, 2), "a tally's delays are a list")))
            goto done;
        if (observe_delays(PyTuple_GET_ITEM(hn, 0), PyTuple_GET_ITEM(hn, 1), delays) < 0)
            goto done;
    }
    r = 0;
done:
    Py_XDECREF(c);
    Py_XDECREF(hn);
    Py_XDECREF(delays);
    Py_DECREF(v);
    return r;
}

static PyObject *produced(Hook *h, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "produced(responses, tally): tally a dict");
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "responses is iterable");  /* a list: itself */
    if (!seq)
        return NULL;
    for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
        PyObject *t = Py_NewRef(PySequence_Fast_GET_ITEM(seq, i));
        int r = count_topic(h->state[0], h->state[2], t);
        Py_DECREF(t);
        if (r < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    Py_DECREF(seq);
    PyObject *tally = Py_NewRef(args[1]), *topic, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(tally, &pos, &topic, &v)) {
        Py_INCREF(topic);
        int r = count_tally(h->state, topic, v);
        Py_DECREF(topic);
        if (r < 0) {
            Py_DECREF(tally);
            return NULL;
        }
    }
    Py_DECREF(tally);
    Py_RETURN_NONE;
}

static PyObject *hook_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf, PyObject *kwnames) {
    Hook *h = (Hook *)self;
    if (kwnames && PyTuple_GET_SIZE(kwnames)) {
        PyErr_SetString(PyExc_TypeError, "a metrics hook takes no keyword arguments");
        return NULL;
    }
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    return h->kind == REQUEST_DONE ? request_done(h, args, nargs) : produced(h, args, nargs);
}

static int hook_traverse(Hook *h, visitproc visit, void *arg) {
    for (int i = 0; i < 5; i++)
        Py_VISIT(h->state[i]);
    return 0;
}

static int hook_clear(Hook *h) {
    for (int i = 0; i < 5; i++)
        Py_CLEAR(h->state[i]);
    return 0;
}

static void hook_dealloc(Hook *h) {
    PyObject_GC_UnTrack(h);
    hook_clear(h);
    PyObject_GC_Del(h);
}

static PyTypeObject HookType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "broker._metrics.Hook",
    .tp_basicsize = sizeof(Hook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A BrokerMetrics method, compiled, bound to its metrics' children (see request_done_hook, "
              "produced_hook).",
    .tp_vectorcall_offset = offsetof(Hook, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_traverse = (traverseproc)hook_traverse,
    .tp_clear = (inquiry)hook_clear,
    .tp_dealloc = (destructor)hook_dealloc,
};

static PyObject *new_hook(int kind, PyObject *const *args, Py_ssize_t nargs, const char *usage) {
    if (!counter_type) {
        PyErr_SetString(PyExc_RuntimeError, "broker._metrics.setup() was not called");
        return NULL;
    }
    if (nargs != 5 || !PyDict_Check(args[0]) || !PyDict_Check(args[kind == REQUEST_DONE ? 2 : 1])) {
        PyErr_SetString(PyExc_TypeError, usage);
        return NULL;
    }
    Hook *h = PyObject_GC_New(Hook, &HookType);
    if (!h)
        return NULL;
    h->vectorcall = hook_vectorcall;
    h->kind = kind;
    for (int i = 0; i < 5; i++)
        h->state[i] = Py_NewRef(args[i]);
    PyObject_GC_Track(h);
    return (PyObject *)h;
}

static PyObject *mx_request_done_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return new_hook(REQUEST_DONE, args, nargs,
                    "request_done_hook(api_children, make_api, walk_plans, walk_plan_of, count_errors): dicts first "
                    "and third");
}

static PyObject *mx_produced_hook(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    return new_hook(PRODUCED, args, nargs,
                    "produced_hook(topic_children, delay_children, topic_if_exists, make_topic, make_delay): "
                    "dicts first and second");
}

static PyObject *mx_setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "setup(counter_cls, histogram_cls)");
        return NULL;
    }
    Py_XSETREF(counter_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(histogram_type, (PyTypeObject *)Py_NewRef(args[1]));
    value_off = slot_offset(counter_type, s_value);
    counts_off = slot_offset(histogram_type, s_counts);
    sum_off = slot_offset(histogram_type, s_sum);
    bounds_off = slot_offset(histogram_type, s_bounds);
    ms_buckets_off = slot_offset(histogram_type, s_ms_buckets);
    if (PyErr_Occurred())
        return NULL;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"setup", (PyCFunction)(void (*)(void))mx_setup, METH_FASTCALL, "setup(counter_cls, histogram_cls)"},
    {"request_done_hook", (PyCFunction)(void (*)(void))mx_request_done_hook, METH_FASTCALL,
     "request_done_hook(api_children, make_api, walk_plans, walk_plan_of, count_errors) -> request_done(api_key, "
     "response, seconds)"},
    {"walk", (PyCFunction)(void (*)(void))mx_walk, METH_FASTCALL,
     "walk(plan, response, codes): the response's non-zero error codes appended to codes"},
    {"produced_hook", (PyCFunction)(void (*)(void))mx_produced_hook, METH_FASTCALL,
     "produced_hook(topic_children, delay_children, topic_if_exists, make_topic, make_delay) -> "
     "produced(responses, tally)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_metrics", NULL, -1, methods};

PyMODINIT_FUNC PyInit__metrics(void) {
    if (PyType_Ready(&HookType) < 0)
        return NULL;
    if (!(s_value = PyUnicode_InternFromString("value")) || !(s_counts = PyUnicode_InternFromString("counts"))
        || !(s_sum = PyUnicode_InternFromString("sum")) || !(s_bounds = PyUnicode_InternFromString("bounds"))
        || !(s_ms_buckets = PyUnicode_InternFromString("ms_buckets"))
        || !(s_observe_ms = PyUnicode_InternFromString("observe_ms")) || !(s_name = PyUnicode_InternFromString("name"))
        || !(s_partition_responses = PyUnicode_InternFromString("partition_responses"))
        || !(s_error_code = PyUnicode_InternFromString("error_code")) || !(one = PyLong_FromLong(1))
        || !(thousand = PyFloat_FromDouble(1000.0)))
        return NULL;
    return PyModule_Create(&module);
}
