/* Hot loops of the format layer in C: the entry walk, CRC-32 and CRC-32C over many ranges, and the single-record
 * v2 batch encoder. Each has a numpy/pure-Python twin in the format modules (the reference, used when this module
 * is not built); tests check both give identical results. No Python objects per record: arrays in, arrays out. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static uint32_t crc32_table[8][256];
static uint32_t crc32c_table[8][256];

static void make_tables(uint32_t table[8][256], uint32_t poly) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
        table[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++) table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sliced(uint32_t table[8][256], const uint8_t *p, Py_ssize_t n) {
    uint32_t c = 0xffffffffu;
    while (n >= 8) {
        uint32_t lo = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
        uint32_t hi = (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
        c = table[7][lo & 0xff] ^ table[6][(lo >> 8) & 0xff] ^ table[5][(lo >> 16) & 0xff] ^ table[4][lo >> 24] ^
            table[3][hi & 0xff] ^ table[2][(hi >> 8) & 0xff] ^ table[1][(hi >> 16) & 0xff] ^ table[0][hi >> 24];
        p += 8;
        n -= 8;
    }
    while (n--) c = table[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

#if defined(__x86_64__)
#include <nmmintrin.h>
static int have_sse42 = 0;
__attribute__((target("sse4.2"))) static uint32_t crc32c_hw(const uint8_t *p, Py_ssize_t n) {
    uint64_t c = 0xffffffffu;
    while (n >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        n -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (n--) c32 = _mm_crc32_u8(c32, *p++);
    return c32 ^ 0xffffffffu;
}
#endif

static uint32_t crc32c(const uint8_t *p, Py_ssize_t n) {
#if defined(__x86_64__)
    if (have_sse42) return crc32c_hw(p, n);
#endif
    return crc_sliced(crc32c_table, p, n);
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

/* walk(buffer) -> (positions: bytes of int64, consumed, bad_position): stops at an incomplete entry (consumed says
 * where); bad_position >= 0 where an entry declares a size below 14 (Kafka's CorruptRecordException). */
static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*", &buf)) return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t end = buf.len, pos = 0, n = 0, cap = 1024;
    int64_t *out = PyMem_Malloc(cap * sizeof(int64_t));
    Py_ssize_t bad = -1;
    while (pos + 17 <= end) {
        int32_t size = be32(p + pos + 8);
        if (size < 14) { bad = pos; break; }
        Py_ssize_t next = pos + 12 + (Py_ssize_t)size;
        if (next > end) break;
        if (n == cap) { cap *= 2; out = PyMem_Realloc(out, cap * sizeof(int64_t)); }
        out[n++] = pos;
        pos = next;
    }
    PyBuffer_Release(&buf);
    PyObject *positions = PyBytes_FromStringAndSize((const char *)out, n * sizeof(int64_t));
    PyMem_Free(out);
    return Py_BuildValue("(Nnn)", positions, pos, bad);
}

/* crc_ranges(buffer, starts, ends, castagnoli) -> bytes of uint32 */
static PyObject *crc_ranges(PyObject *self, PyObject *args) {
    Py_buffer buf, starts, ends;
    int castagnoli;
    if (!PyArg_ParseTuple(args, "y*y*y*p", &buf, &starts, &ends, &castagnoli)) return NULL;
    Py_ssize_t n = starts.len / 8;
    PyObject *result = PyBytes_FromStringAndSize(NULL, n * 4);
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(result);
    const int64_t *s = starts.buf, *e = ends.buf;
    const uint8_t *p = buf.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (s[i] < 0 || e[i] > buf.len || e[i] < s[i]) { out[i] = 0; continue; }
        out[i] = castagnoli ? crc32c(p + s[i], e[i] - s[i]) : crc_sliced(crc32_table, p + s[i], e[i] - s[i]);
    }
    PyBuffer_Release(&buf); PyBuffer_Release(&starts); PyBuffer_Release(&ends);
    return result;
}

static inline int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) { z >>= 7; n++; }
    return n;
}

static inline uint8_t *put_varint(uint8_t *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) { *o++ = (uint8_t)(z | 0x80); z >>= 7; }
    *o++ = (uint8_t)z;
    return o;
}

static inline uint8_t *put64(uint8_t *o, int64_t v) { for (int i = 7; i >= 0; i--) *o++ = (uint8_t)((uint64_t)v >> (8 * i)); return o; }
static inline uint8_t *put32(uint8_t *o, int32_t v) { for (int i = 3; i >= 0; i--) *o++ = (uint8_t)((uint32_t)v >> (8 * i)); return o; }
static inline uint8_t *put16(uint8_t *o, int16_t v) { *o++ = (uint8_t)((uint16_t)v >> 8); *o++ = (uint8_t)v; return o; }

/* single_record_batches(buffer, offsets, timestamps, types, key_pos, key_len, value_pos, value_len, record_attrs,
 *                       leader_epoch) -> (bytes, sizes: bytes of int64); all arrays int64 except record_attrs (uint8) */
static PyObject *single_record_batches(PyObject *self, PyObject *args) {
    Py_buffer buf, off, ts, ty, kp, kl, vp, vl, ra;
    int leader_epoch;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*y*y*i", &buf, &off, &ts, &ty, &kp, &kl, &vp, &vl, &ra, &leader_epoch))
        return NULL;
    Py_ssize_t n = off.len / 8, total = 0;
    const int64_t *O = off.buf, *T = ts.buf, *TY = ty.buf, *KP = kp.buf, *KL = kl.buf, *VP = vp.buf, *VL = vl.buf;
    const uint8_t *RA = ra.buf, *src = buf.buf;
    PyObject *sizes = PyBytes_FromStringAndSize(NULL, n * 8);
    int64_t *S = (int64_t *)PyBytes_AS_STRING(sizes);
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t k = KL[i] > 0 ? KL[i] : 0, v = VL[i] > 0 ? VL[i] : 0;
        int64_t body = 1 + 1 + 1 + varint_size(KL[i]) + k + varint_size(VL[i]) + v + 1;
        S[i] = 61 + varint_size(body) + body;
        total += S[i];
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *start = o;
        int64_t k = KL[i] > 0 ? KL[i] : 0, v = VL[i] > 0 ? VL[i] : 0;
        int64_t body = 1 + 1 + 1 + varint_size(KL[i]) + k + varint_size(VL[i]) + v + 1;
        o = put64(o, O[i]);
        o = put32(o, (int32_t)(S[i] - 12));
        o = put32(o, leader_epoch);
        *o++ = 2;
        uint8_t *crc_at = o;
        o += 4;
        o = put16(o, TY[i] == 1 ? 0x08 : 0);
        o = put32(o, 0);
        o = put64(o, T[i]);
        o = put64(o, T[i]);
        o = put64(o, -1);
        o = put16(o, -1);
        o = put32(o, -1);
        o = put32(o, 1);
        o = put_varint(o, body);
        *o++ = RA[i];
        *o++ = 0; /* timestamp delta */
        *o++ = 0; /* offset delta */
        o = put_varint(o, KL[i]);
        memcpy(o, src + KP[i], k); o += k;
        o = put_varint(o, VL[i]);
        memcpy(o, src + VP[i], v); o += v;
        *o++ = 0; /* headers */
        put32(crc_at, (int32_t)crc32c(start + 21, o - start - 21));
    }
    PyBuffer_Release(&buf); PyBuffer_Release(&off); PyBuffer_Release(&ts); PyBuffer_Release(&ty);
    PyBuffer_Release(&kp); PyBuffer_Release(&kl); PyBuffer_Release(&vp); PyBuffer_Release(&vl); PyBuffer_Release(&ra);
    return Py_BuildValue("(NN)", result, sizes);
}

/* digest_stream(buffer, offsets, timestamps, key_pos, key_len, value_pos, value_len, with_timestamps) -> bytes:
 * the serialization migrate.format.digest hashes, for records without headers (header count 0). */
static PyObject *digest_stream(PyObject *self, PyObject *args) {
    Py_buffer buf, off, ts, kp, kl, vp, vl;
    int with_ts;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*y*y*p", &buf, &off, &ts, &kp, &kl, &vp, &vl, &with_ts)) return NULL;
    Py_ssize_t n = off.len / 8, total = 0;
    const int64_t *O = off.buf, *T = ts.buf, *KP = kp.buf, *KL = kl.buf, *VP = vp.buf, *VL = vl.buf;
    const uint8_t *src = buf.buf;
    for (Py_ssize_t i = 0; i < n; i++)
        total += 8 + (with_ts ? 8 : 0) + (KL[i] < 0 ? 1 : 5 + KL[i]) + (VL[i] < 0 ? 1 : 5 + VL[i]) + 4;
    PyObject *result = PyBytes_FromStringAndSize(NULL, total);
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    for (Py_ssize_t i = 0; i < n; i++) {
        o = put64(o, O[i]);
        if (with_ts) o = put64(o, T[i]);
        if (KL[i] < 0) *o++ = 1; else { *o++ = 0; o = put32(o, (int32_t)KL[i]); memcpy(o, src + KP[i], KL[i]); o += KL[i]; }
        if (VL[i] < 0) *o++ = 1; else { *o++ = 0; o = put32(o, (int32_t)VL[i]); memcpy(o, src + VP[i], VL[i]); o += VL[i]; }
        o = put32(o, 0);
    }
    PyBuffer_Release(&buf); PyBuffer_Release(&off); PyBuffer_Release(&ts); PyBuffer_Release(&kp);
    PyBuffer_Release(&kl); PyBuffer_Release(&vp); PyBuffer_Release(&vl);
    return result;
}

static inline int get_varint(const uint8_t **pp, const uint8_t *end, int64_t *out, int max_bytes) {
    uint64_t raw = 0;
    int shift = 0;
    const uint8_t *p = *pp;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) { *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1); *pp = p; return 0; }
        shift += 7;
    }
    return -1;
}

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

/* v2_records(buffer, positions, sizes) -> (status, counts, offsets, timestamps, key_pos, key_len, value_pos,
 * value_len): the records of uncompressed v2 batches. status per batch: 0 decoded, 1 has headers or is compressed
 * (decode it in Python), 2 malformed (decode it in Python to raise the precise error). */
static PyObject *v2_records(PyObject *self, PyObject *args) {
    Py_buffer buf, pos, siz;
    if (!PyArg_ParseTuple(args, "y*y*y*", &buf, &pos, &siz)) return NULL;
    Py_ssize_t nb = pos.len / 8, total = 0;
    const int64_t *P = pos.buf, *S = siz.buf;
    const uint8_t *src = buf.buf;
    for (Py_ssize_t i = 0; i < nb; i++) {
        int32_t count = be32(src + P[i] + 57);
        if (count > 0) total += count;
    }
    PyObject *status = PyBytes_FromStringAndSize(NULL, nb), *counts = PyBytes_FromStringAndSize(NULL, nb * 8);
    PyObject *cols[6];
    for (int c = 0; c < 6; c++) cols[c] = PyBytes_FromStringAndSize(NULL, total * 8);
    uint8_t *ST = (uint8_t *)PyBytes_AS_STRING(status);
    int64_t *CN = (int64_t *)PyBytes_AS_STRING(counts), *C[6];
    for (int c = 0; c < 6; c++) C[c] = (int64_t *)PyBytes_AS_STRING(cols[c]);
    Py_ssize_t r = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        const uint8_t *b = src + P[i], *end = b + S[i], *p = b + 61;
        int16_t attributes = (int16_t)(b[21] << 8 | b[22]);
        int32_t count = be32(b + 57);
        int64_t base = be64(b), base_ts = be64(b + 27), max_ts = be64(b + 35);
        CN[i] = 0;
        ST[i] = 0;
        if ((attributes & 7) != 0 || count < 0) { ST[i] = 1; continue; }
        Py_ssize_t r0 = r;
        for (int32_t k = 0; k < count && ST[i] == 0; k++) {
            int64_t length, tsd, od, kl, vl, hc;
            if (get_varint(&p, end, &length, 5) || length < 6 || p + length > end) { ST[i] = 2; break; }
            const uint8_t *rend = p + length;
            p++;
            if (get_varint(&p, rend, &tsd, 10) || get_varint(&p, rend, &od, 5) || get_varint(&p, rend, &kl, 5) ||
                kl < -1 || p + (kl > 0 ? kl : 0) > rend) { ST[i] = 2; break; }
            C[2][r] = p - src; C[3][r] = kl; p += kl > 0 ? kl : 0;
            if (get_varint(&p, rend, &vl, 5) || vl < -1 || p + (vl > 0 ? vl : 0) > rend) { ST[i] = 2; break; }
            C[4][r] = p - src; C[5][r] = vl; p += vl > 0 ? vl : 0;
            if (get_varint(&p, rend, &hc, 5)) { ST[i] = 2; break; }
            if (hc != 0) { ST[i] = 1; break; }
            if (p != rend) { ST[i] = 2; break; }
            C[0][r] = (int64_t)((uint64_t)base + (uint64_t)od);
            C[1][r] = (attributes & 0x08) ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)tsd);
            r++;
        }
        if (ST[i] == 0 && p != end) ST[i] = 2;
        if (ST[i] != 0) { r = r0; continue; }
        CN[i] = r - r0;
    }
    PyBuffer_Release(&buf); PyBuffer_Release(&pos); PyBuffer_Release(&siz);
    for (int c = 0; c < 6; c++) _PyBytes_Resize(&cols[c], r * 8);
    return Py_BuildValue("(NNNNNNNN)", status, counts, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]);
}

static PyMethodDef methods[] = {
    {"v2_records", v2_records, METH_VARARGS, "records of uncompressed v2 batches, as columns"},
    {"digest_stream", digest_stream, METH_VARARGS, "content-digest serialization of header-less records"},
    {"walk", walk, METH_VARARGS, "entry positions of a buffer"},
    {"crc_ranges", crc_ranges, METH_VARARGS, "CRC-32 or CRC-32C of many ranges"},
    {"single_record_batches", single_record_batches, METH_VARARGS, "one v2 batch per record"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_speedups", NULL, -1, methods};

PyMODINIT_FUNC PyInit__speedups(void) {
    make_tables(crc32_table, 0xEDB88320u);
    make_tables(crc32c_table, 0x82F63B78u);
#if defined(__x86_64__)
    __builtin_cpu_init();
    have_sse42 = __builtin_cpu_supports("sse4.2");
#endif
    return PyModule_Create(&module);
}
