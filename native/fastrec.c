/* autoswitch._fastrec: the per-record loop of broker/record.py walk in C.
 *
 * walk_batch(buf, pos, end, seg_end, max_record) applies every per-record rule of record.walk
 * (length chain, CRC32 over bytes [4, total), header fields, padding placement) and returns the
 * message offsets and sizes as int64 bytes; any stop before `end` makes record.walk_fast re-run
 * the reference Python walk for the exact reason (a fuzz test checks they agree).
 * walk_len(buf, pos, end) -> stop: the same length chain without CRCs (replication reads
 * with verify_reads off only need the whole-record prefix).
 * decode_run(run, phy, cls): a consumer's decode of a validated record run into messages.
 * The GIL is released during the loops (the buffer is pinned by the buffer protocol).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

#define HEADER_SIZE 40
#define HARD_MAX_RECORD (256u * 1024u * 1024u)

static uint32_t be32(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

/* ---------------------------------------------------------------------------------------
 * CRC-32 (zlib's polynomial, reflected) with carry-less multiplication.
 *
 * zlib's table CRC costs ~0.33 s per GiB of 1 KiB records here, the largest single cost of
 * a replicating slave (every record is checked) and of a master reading with verify_reads.
 * Folding 64 bytes per step with PCLMULQDQ (Gopal et al., "Fast CRC Computation for Generic
 * Polynomials Using PCLMULQDQ Instruction", Intel 2009) is ~4x faster. Used only when the
 * CPU has PCLMULQDQ and SSE4.1 (checked once at import); otherwise zlib. A unit test compares
 * both with zlib.crc32 on random lengths and alignments.
 */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_CLMUL_CODE 1

/* Folding constants x^(k) mod P for the reflected CRC-32 polynomial, and the Barrett pair. */
static const uint64_t K_FOLD64[2] __attribute__((aligned(16))) = {0x0154442bd4ULL, 0x01c6e41596ULL};
static const uint64_t K_FOLD16[2] __attribute__((aligned(16))) = {0x01751997d0ULL, 0x00ccaa009eULL};
static const uint64_t K_64TO32[2] __attribute__((aligned(16))) = {0x0163cd6124ULL, 0};
static const uint64_t K_BARRETT[2] __attribute__((aligned(16))) = {0x01db710641ULL, 0x01f7011641ULL};

/* fold one 128-bit lane forward by the distance the constant pair encodes, then add `data` */
__attribute__((target("pclmul,sse4.1"))) static inline __m128i fold(__m128i acc, __m128i k, __m128i data) {
    __m128i lo = _mm_clmulepi64_si128(acc, k, 0x00);
    __m128i hi = _mm_clmulepi64_si128(acc, k, 0x11);
    return _mm_xor_si128(_mm_xor_si128(hi, lo), data);
}

/* len >= 64 and a multiple of 16; crc is the pre-inverted running value (zlib's ~crc) */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_clmul_blocks(uint32_t crc, const unsigned char *p,
                                                                           size_t len) {
    __m128i a = _mm_loadu_si128((const __m128i *)p);
    __m128i b = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i c = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i d = _mm_loadu_si128((const __m128i *)(p + 48));
    a = _mm_xor_si128(a, _mm_cvtsi32_si128((int)crc));
    p += 64;
    len -= 64;
    __m128i k = _mm_load_si128((const __m128i *)K_FOLD64);
    for (; len >= 64; p += 64, len -= 64) {
        a = fold(a, k, _mm_loadu_si128((const __m128i *)p));
        b = fold(b, k, _mm_loadu_si128((const __m128i *)(p + 16)));
        c = fold(c, k, _mm_loadu_si128((const __m128i *)(p + 32)));
        d = fold(d, k, _mm_loadu_si128((const __m128i *)(p + 48)));
    }
    k = _mm_load_si128((const __m128i *)K_FOLD16);
    a = fold(a, k, b);
    a = fold(a, k, c);
    a = fold(a, k, d);
    for (; len >= 16; p += 16, len -= 16)
        a = fold(a, k, _mm_loadu_si128((const __m128i *)p));
    /* 128 -> 64 bits */
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i t = _mm_clmulepi64_si128(a, k, 0x10);
    a = _mm_xor_si128(_mm_srli_si128(a, 8), t);
    k = _mm_loadl_epi64((const __m128i *)K_64TO32);
    t = _mm_srli_si128(a, 4);
    a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k, 0x00), t);
    /* Barrett reduction to 32 bits */
    k = _mm_load_si128((const __m128i *)K_BARRETT);
    t = _mm_and_si128(a, low32);
    t = _mm_clmulepi64_si128(t, k, 0x10);
    t = _mm_and_si128(t, low32);
    t = _mm_clmulepi64_si128(t, k, 0x00);
    a = _mm_xor_si128(a, t);
    return (uint32_t)_mm_extract_epi32(a, 1);
}
#endif

static int use_clmul = 0;

/* zlib-compatible crc32(crc, p, len) */
static uint32_t crc32_any(uint32_t crc, const unsigned char *p, size_t len) {
#ifdef HAVE_CLMUL_CODE
    if (use_clmul && len >= 64) {
        size_t blocks = len & ~(size_t)15;
        crc = ~crc_clmul_blocks(~crc, p, blocks);
        p += blocks;
        len -= blocks;
        if (len == 0)
            return crc;
    }
#endif
    return (uint32_t)crc32(crc, p, (uInt)len);
}

/* crc32(data, value=0) -> int: zlib.crc32's contract, through the fast path (tests) */
static PyObject *py_crc32(PyObject *self, PyObject *args) {
    Py_buffer view;
    unsigned int value = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*|I", &view, &value))
        return NULL;
    uint32_t r;
    Py_BEGIN_ALLOW_THREADS
    r = crc32_any(value, (const unsigned char *)view.buf, (size_t)view.len);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(r);
}

static PyObject *walk_len(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn", &view, &pos, &end))
        return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk_len: need 0 <= pos <= end <= len(buf)");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t p = pos;
    Py_BEGIN_ALLOW_THREADS
    while (end - p >= HEADER_SIZE) {
        uint32_t total = be32(b + p + 4);
        if (total < HEADER_SIZE || total > HARD_MAX_RECORD || (Py_ssize_t)total > end - p)
            break;
        p += (Py_ssize_t)total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(p);
}

static uint64_t be64(const unsigned char *p) {
    return ((uint64_t)be32(p) << 32) | (uint64_t)be32(p + 4);
}

/* walk_batch(buf, pos, end, seg_end, max_record) -> (msg_offsets, msg_totals, stop, uniform, q0)
 * Every per-record rule of record.walk except the per-topic queue-offset sequence: length
 * chain, magic/version/flags/reserved, lengths agree, CRC, message (topic non-empty, size
 * <= max_record, room for segment padding) or padding (no topic/id, ends at seg_end). Returns
 * the message records' offsets and sizes (int64 bytes), where it stopped, and whether all
 * messages share the first one's topic with consecutive queue offsets from q0 (then the index
 * entries need no grouping). A stop before `end` makes the caller re-run walk for the reason. */
static PyObject *walk_batch(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, seg_end, max_record;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnn", &view, &pos, &end, &seg_end, &max_record))
        return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "walk_batch: need 0 <= pos <= end <= len(buf)");
        return NULL;
    }
    Py_ssize_t cap = (end - pos) / HEADER_SIZE + 1;
    PyObject *offs_o = PyBytes_FromStringAndSize(NULL, cap * (Py_ssize_t)sizeof(int64_t));
    PyObject *tot_o = PyBytes_FromStringAndSize(NULL, cap * (Py_ssize_t)sizeof(int64_t));
    if (offs_o == NULL || tot_o == NULL) {
        Py_XDECREF(offs_o);
        Py_XDECREF(tot_o);
        PyBuffer_Release(&view);
        return NULL;
    }
    int64_t *offs = (int64_t *)PyBytes_AS_STRING(offs_o);
    int64_t *tots = (int64_t *)PyBytes_AS_STRING(tot_o);
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t p = pos, n = 0;
    int uniform = 1;
    uint64_t q0 = 0;
    const unsigned char *t0 = NULL;
    unsigned int tl0 = 0;
    Py_BEGIN_ALLOW_THREADS
    while (end - p >= HEADER_SIZE) {
        const unsigned char *h = b + p;
        uint32_t crc = be32(h), total = be32(h + 4);
        if (total < HEADER_SIZE || total > HARD_MAX_RECORD || (Py_ssize_t)total > end - p)
            break;
        unsigned int magic = h[8], version = h[9], rtype = h[10], flags = h[11];
        unsigned int tl = h[32], ml = h[33], rsv = ((unsigned int)h[34] << 8) | h[35];
        uint32_t bl = be32(h + 36);
        Py_ssize_t nxt = p + (Py_ssize_t)total;
        if (magic != 0xA5 || version != 1 || flags || rsv ||
            (uint64_t)HEADER_SIZE + tl + ml + bl != (uint64_t)total)
            break;
        if (crc32_any(0, h + 4, (size_t)(total - 4)) != crc)
            break;
        if (rtype == 1) {
            Py_ssize_t room = seg_end - nxt;
            if (tl == 0 || (Py_ssize_t)total > max_record || (room > 0 && room < HEADER_SIZE))
                break;
            uint64_t q = be64(h + 16);
            if (t0 == NULL) {
                t0 = h + HEADER_SIZE;
                tl0 = tl;
                q0 = q;
            } else if (uniform && (tl != tl0 || memcmp(h + HEADER_SIZE, t0, tl) != 0 || q != q0 + (uint64_t)n)) {
                uniform = 0;
            }
            offs[n] = (int64_t)p;
            tots[n] = (int64_t)total;
            n++;
        } else if (rtype == 2) {
            if (tl || ml || nxt != seg_end)
                break;
        } else {
            break;
        }
        p = nxt;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    if (_PyBytes_Resize(&offs_o, n * (Py_ssize_t)sizeof(int64_t)) < 0) {
        Py_DECREF(tot_o);
        return NULL;
    }
    if (_PyBytes_Resize(&tot_o, n * (Py_ssize_t)sizeof(int64_t)) < 0) {
        Py_DECREF(offs_o);
        return NULL;
    }
    return Py_BuildValue("(NNniK)", offs_o, tot_o, p, uniform, (unsigned long long)q0);
}

/* decode_run(run, phy, cls) -> [cls(topic, queue_offset, phy_offset, msg_id, born_ts_ms, body,
 * epoch, size), ...]: the messages of a record run that walk_batch already validated (CRCs,
 * header rules), built as instances of the 8-field tuple subclass `cls` (record.StoredMessage).
 * A consumer keeping up with ~100k msg/s spent ~0.9 us per message in the Python loop that does
 * this (header unpack, slices, UTF-8, NamedTuple), most of its CPU. Lengths are re-checked; any
 * surprise raises ValueError and the caller re-runs the Python loop for the exact LogCorrupt. */
static PyObject *decode_run(PyObject *self, PyObject *args) {
    PyObject *run;
    long long phy;
    PyTypeObject *cls;
    if (!PyArg_ParseTuple(args, "SLO!", &run, &phy, &PyType_Type, &cls))
        return NULL;
    if (!PyType_IsSubtype(cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "cls must be a tuple subclass");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)PyBytes_AS_STRING(run);
    Py_ssize_t n = PyBytes_GET_SIZE(run), p = 0;
    PyObject *out = PyList_New(0);
    PyObject *topic = NULL;
    const unsigned char *topic_b = NULL;
    unsigned int topic_len = 0;
    if (out == NULL)
        return NULL;
    while (p < n) {
        const unsigned char *h = b + p;
        if (n - p < HEADER_SIZE)
            goto bad;
        uint32_t total = be32(h + 4);
        unsigned int tl = h[32], ml = h[33];
        uint32_t bl = be32(h + 36);
        if (total < HEADER_SIZE || (Py_ssize_t)total > n - p || h[10] != 1 || tl == 0 ||
            (uint64_t)HEADER_SIZE + tl + ml + bl != (uint64_t)total)
            goto bad;
        const unsigned char *t = h + HEADER_SIZE;
        if (topic == NULL || tl != topic_len || memcmp(t, topic_b, tl) != 0) {
            Py_XDECREF(topic);
            topic = PyUnicode_DecodeUTF8((const char *)t, tl, "strict");
            if (topic == NULL)
                goto fail;
            topic_b = t;
            topic_len = tl;
        }
        PyObject *item = cls->tp_alloc(cls, 8);
        if (item == NULL)
            goto fail;
        Py_INCREF(topic);
        PyTuple_SET_ITEM(item, 0, topic);
        PyTuple_SET_ITEM(item, 1, PyLong_FromUnsignedLongLong(be64(h + 16)));
        PyTuple_SET_ITEM(item, 2, PyLong_FromLongLong(phy + (long long)p));
        PyTuple_SET_ITEM(item, 3, PyUnicode_DecodeUTF8((const char *)t + tl, ml, "strict"));
        PyTuple_SET_ITEM(item, 4, PyLong_FromUnsignedLongLong(be64(h + 24)));
        PyTuple_SET_ITEM(item, 5, PyBytes_FromStringAndSize((const char *)t + tl + ml, bl));
        PyTuple_SET_ITEM(item, 6, PyLong_FromUnsignedLong(be32(h + 12)));
        PyTuple_SET_ITEM(item, 7, PyLong_FromUnsignedLong(total));
        for (int i = 1; i < 8; i++) {
            if (PyTuple_GET_ITEM(item, i) == NULL) {
                Py_DECREF(item);
                goto fail;
            }
        }
        int rc = PyList_Append(out, item);
        Py_DECREF(item);
        if (rc < 0)
            goto fail;
        p += (Py_ssize_t)total;
    }
    Py_XDECREF(topic);
    return out;
bad:
    PyErr_Format(PyExc_ValueError, "malformed record at run offset %zd", p);
fail:
    Py_XDECREF(topic);
    Py_DECREF(out);
    return NULL;
}

/* fold_records(buf, pos, end, limit, h) -> (h, stop): folds the (crc32, total_len) word of every
 * whole record of buf[pos:end] that starts before `limit` into the 64-bit range digest h (FNV-1a
 * over 8-byte words; ha/digest.py). Only headers are touched: the CRC field already stands for
 * the record's content, so a digest costs a length-chain walk, not a pass over every byte. */
static PyObject *fold_records(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, limit;
    unsigned long long h;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnK", &view, &pos, &end, &limit, &h))
        return NULL;
    if (pos < 0 || end < pos || end > view.len) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "fold_records: need 0 <= pos <= end <= len(buf)");
        return NULL;
    }
    const unsigned char *b = (const unsigned char *)view.buf;
    Py_ssize_t p = pos;
    uint64_t acc = (uint64_t)h;
    Py_BEGIN_ALLOW_THREADS
    while (end - p >= HEADER_SIZE && p < limit) {
        uint32_t crc = be32(b + p), total = be32(b + p + 4);
        if (total < HEADER_SIZE || total > HARD_MAX_RECORD || (Py_ssize_t)total > end - p)
            break;
        acc = (acc ^ (((uint64_t)crc << 32) | (uint64_t)total)) * 0x100000001B3ULL;
        p += (Py_ssize_t)total;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return Py_BuildValue("(Kn)", (unsigned long long)acc, p);
}

static PyMethodDef methods[] = {
    {"walk_batch", walk_batch, METH_VARARGS,
     "walk_batch(buf, pos, end, seg_end, max_record) -> (msg offsets, msg sizes, stop, uniform, q0)"},
    {"fold_records", fold_records, METH_VARARGS,
     "fold_records(buf, pos, end, limit, h) -> (h, stop): a range digest over the records' (crc, length) words"},
    {"walk_len", walk_len, METH_VARARGS, "walk_len(buf, pos, end) -> stop: the record length chain only"},
    {"decode_run", decode_run, METH_VARARGS,
     "decode_run(run, phy, cls) -> [cls(...)]: the messages of a validated record run"},
    {"crc32", py_crc32, METH_VARARGS, "crc32(data, value=0) -> int: zlib.crc32, carry-less multiply when the CPU has it"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_fastrec", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__fastrec(void) {
#ifdef HAVE_CLMUL_CODE
    __builtin_cpu_init();
    use_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddIntConstant(m, "CLMUL", use_clmul) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
