/* Hot loops of the format layer in C: the entry walk, CRC-32 and CRC-32C over many ranges, the single-record v2
 * batch encoder, the content-digest serialization and the columnar v2 record decoder. Each has a Python twin in the
 * format modules (the reference, used when this module is not built or is switched off, see accel.py); tests check
 * both give identical results. No Python objects per record: arrays in, bytes out.
 *
 * Every argument may come from an untrusted file, or from a caller's mistake: each function checks that its arrays
 * are 1-D, C-contiguous, aligned and of the item type it reads, that parallel arrays have one length, and that every
 * position and length lies inside its buffer, and raises TypeError, ValueError, OverflowError or MemoryError
 * otherwise. The checks run in a pass over the arrays before the loop that writes (which most functions need anyway
 * to size their output exactly). Public C API only.
 *
 * The writing loops run without the GIL, so the driver's conversion goes on while Dask's scheduler and dashboard
 * (threads of the same process) start or serve, and a worker's event loop answers while a chunk converts. Without
 * the GIL another thread could change an argument between the checking pass and the loop, so each loop takes every
 * position and length it uses once, into a local, and checks again that it reads and writes inside its buffers
 * (cheap comparisons); an argument changed under it raises RuntimeError (CHANGED_UNDER_US) instead of reading or
 * writing out of bounds. */
#include "_speedups_base.h"

/* --- the entry walk ------------------------------------------------------------------------------------------ */

/* walk(buffer) -> (positions: bytes of int64, consumed, bad_position): stops at an incomplete entry (consumed says
 * where); bad_position >= 0 where an entry declares a size below 14 (Kafka's CorruptRecordException). */
static PyObject *walk(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*:walk", &buf)) return NULL;
    const uint8_t *p = buf.buf;
    Py_ssize_t end = buf.len, pos = 0, n = 0, cap = 0, bad = -1;
    int64_t *out = NULL;
    while (end - pos >= 17) {
        int32_t size = be32(p + pos + 8);
        if (size < 14) {
            bad = pos;
            break;
        }
        if ((Py_ssize_t)size + 12 > end - pos) break;
        if (n == cap) {
            /* at most end / 26 entries fit, so the byte count cannot overflow */
            Py_ssize_t grown_cap = cap ? cap * 2 : 1024;
            int64_t *grown = PyMem_Realloc(out, (size_t)grown_cap * sizeof(int64_t));
            if (grown == NULL) {
                PyMem_Free(out);
                PyBuffer_Release(&buf);
                return PyErr_NoMemory();
            }
            out = grown;
            cap = grown_cap;
        }
        out[n++] = pos;
        pos += 12 + (Py_ssize_t)size;
        /* each step depends on the size just read: fetch the header a few entries ahead, guessing they are alike */
        if (end - pos > 8 * ((Py_ssize_t)size + 12)) __builtin_prefetch(p + pos + 8 * ((Py_ssize_t)size + 12));
    }
    PyBuffer_Release(&buf);
    PyObject *positions = PyBytes_FromStringAndSize((const char *)out, n * (Py_ssize_t)sizeof(int64_t));
    PyMem_Free(out);
    if (positions == NULL) return NULL;
    return Py_BuildValue("(Nnn)", positions, pos, bad);
}

/* --- checksums over many ranges ------------------------------------------------------------------------------- */

/* crc_ranges(buffer, starts, ends, castagnoli) -> bytes of uint32: CRC-32 (or CRC-32C) of buffer[starts[i]:ends[i]]. */
static PyObject *crc_ranges(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int castagnoli;
    Column cols[2] = {{"starts", 'q', NULL}, {"ends", 'q', NULL}};
    if (!PyArg_ParseTuple(args, "y*OOp:crc_ranges", &buf, &cols[0].obj, &cols[1].obj, &castagnoli)) return NULL;
    Py_ssize_t n = 0;
    if (acquire_columns(cols, 2, &n) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *s = cols[0].view.buf, *e = cols[1].view.buf;
    const uint8_t *p = buf.buf;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!(s[i] >= 0 && s[i] <= e[i] && e[i] <= (int64_t)buf.len)) {
            PyErr_Format(PyExc_ValueError, "range %zd [%lld, %lld) is not inside the %zd-byte buffer", i,
                         (long long)s[i], (long long)e[i], buf.len);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, n * 4);
    if (result == NULL) goto done;
    uint32_t *out = (uint32_t *)PyBytes_AS_STRING(result);
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t a = s[i], b = e[i];
        if (!(a >= 0 && a <= b && b <= (int64_t)buf.len)) {
            changed = 1;
            break;
        }
        out[i] = castagnoli ? crc32c(p + a, b - a) : crc32_ieee(p + a, b - a);
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        Py_CLEAR(result);
    }
done:
    release_columns(cols, 2);
    PyBuffer_Release(&buf);
    return result;
}

/* --- the single-record v2 batch encoder ----------------------------------------------------------------------- */

static inline int varint_size(int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    int n = 1;
    while (z >= 0x80) {
        z >>= 7;
        n++;
    }
    return n;
}

static inline uint8_t *put_varint(uint8_t *o, int64_t v) {
    uint64_t z = ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
    while (z >= 0x80) {
        *o++ = (uint8_t)(z | 0x80);
        z >>= 7;
    }
    *o++ = (uint8_t)z;
    return o;
}

static inline uint8_t *put64(uint8_t *o, int64_t v) {
    for (int i = 7; i >= 0; i--) *o++ = (uint8_t)((uint64_t)v >> (8 * i));
    return o;
}
static inline uint8_t *put32(uint8_t *o, int32_t v) {
    for (int i = 3; i >= 0; i--) *o++ = (uint8_t)((uint32_t)v >> (8 * i));
    return o;
}
static inline uint8_t *put16(uint8_t *o, int16_t v) {
    *o++ = (uint8_t)((uint16_t)v >> 8);
    *o++ = (uint8_t)v;
    return o;
}

/* the record inside a single-record batch: attributes, timestamp delta 0, offset delta 0, key, value, 0 headers */
static inline int64_t single_record_body(int64_t key_len, int64_t value_len) {
    return 3 + varint_size(key_len) + (key_len > 0 ? key_len : 0) + varint_size(value_len) +
           (value_len > 0 ? value_len : 0) + 1;
}

/* single_record_batches(buffer, offsets, timestamps, timestamp_types, key_pos, key_len, value_pos, value_len,
 *                       record_attributes, partition_leader_epoch) -> (bytes, sizes: bytes of int64)
 * One uncompressed v2 batch per record; all arrays int64 except record_attributes (uint8); a length of -1 is null. */
static PyObject *single_record_batches(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int leader_epoch;
    Column cols[8] = {{"offsets", 'q', NULL},   {"timestamps", 'q', NULL}, {"timestamp_types", 'q', NULL},
                      {"key_pos", 'q', NULL},   {"key_len", 'q', NULL},    {"value_pos", 'q', NULL},
                      {"value_len", 'q', NULL}, {"record_attributes", 'B', NULL}};
    if (!PyArg_ParseTuple(args, "y*OOOOOOOOi:single_record_batches", &buf, &cols[0].obj, &cols[1].obj, &cols[2].obj,
                          &cols[3].obj, &cols[4].obj, &cols[5].obj, &cols[6].obj, &cols[7].obj, &leader_epoch))
        return NULL;
    Py_ssize_t n = 0;
    if (acquire_columns(cols, 8, &n) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *O = cols[0].view.buf, *T = cols[1].view.buf, *TY = cols[2].view.buf, *KP = cols[3].view.buf,
                  *KL = cols[4].view.buf, *VP = cols[5].view.buf, *VL = cols[6].view.buf;
    const uint8_t *RA = cols[7].view.buf, *src = buf.buf;
    PyObject *result = NULL, *sizes = PyBytes_FromStringAndSize(NULL, n * 8);
    if (sizes == NULL) goto fail;
    int64_t *S = (int64_t *)PyBytes_AS_STRING(sizes);
    Py_ssize_t total = 0;
    /* checking pass: every key and value inside the buffer, every batch length an int32; sizes the output */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!piece_inside(KP[i], KL[i], buf.len, 1) || !piece_inside(VP[i], VL[i], buf.len, 1)) {
            PyErr_Format(PyExc_ValueError,
                         "record %zd: key [%lld, +%lld) or value [%lld, +%lld) is not inside the %zd-byte buffer "
                         "(a length is -1 for null or >= 0)",
                         i, (long long)KP[i], (long long)KL[i], (long long)VP[i], (long long)VL[i], buf.len);
            goto fail;
        }
        int64_t body = single_record_body(KL[i], VL[i]);
        S[i] = 61 + varint_size(body) + body;
        if (S[i] - 12 > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "record %zd: a batch of %lld bytes does not fit v2's int32 length", i,
                         (long long)S[i]);
            goto fail;
        }
        if (add_size(&total, S[i]) < 0) goto fail;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto fail;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        uint8_t *start = o;
        int64_t kp = KP[i], kl = KL[i], vp = VP[i], vl = VL[i], ts = T[i];
        int64_t body = single_record_body(kl, vl);
        /* S is ours; the key and value must still be where they were and size this batch as they did */
        if (!piece_inside(kp, kl, buf.len, 1) || !piece_inside(vp, vl, buf.len, 1) ||
            61 + varint_size(body) + body != S[i]) {
            changed = 1;
            break;
        }
        int64_t k = kl > 0 ? kl : 0, v = vl > 0 ? vl : 0;
        o = put64(o, O[i]);
        o = put32(o, (int32_t)(S[i] - 12));
        o = put32(o, leader_epoch);
        *o++ = 2;
        uint8_t *crc_at = o;
        o += 4;
        o = put16(o, TY[i] == 1 ? 0x08 : 0);
        o = put32(o, 0);
        o = put64(o, ts);
        o = put64(o, ts);
        o = put64(o, -1);
        o = put16(o, -1);
        o = put32(o, -1);
        o = put32(o, 1);
        o = put_varint(o, body);
        *o++ = RA[i];
        *o++ = 0; /* timestamp delta */
        *o++ = 0; /* offset delta */
        o = put_varint(o, kl);
        if (k) memcpy(o, src + kp, (size_t)k);
        o += k;
        o = put_varint(o, vl);
        if (v) memcpy(o, src + vp, (size_t)v);
        o += v;
        *o++ = 0; /* headers */
        put32(crc_at, (int32_t)crc32c(start + 21, o - start - 21));
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        goto fail;
    }
    release_columns(cols, 8);
    PyBuffer_Release(&buf);
    return Py_BuildValue("(NN)", result, sizes);
fail:
    Py_XDECREF(result);
    Py_XDECREF(sizes);
    release_columns(cols, 8);
    PyBuffer_Release(&buf);
    return NULL;
}

/* --- the content digest serialization ------------------------------------------------------------------------- */

/* digest_stream(buffer, offsets, timestamps, key_pos, key_len, value_pos, value_len, with_timestamps) -> bytes:
 * the serialization migrate.format.digest hashes, for records without headers (header count 0); a negative length
 * is null. */
static PyObject *digest_stream(PyObject *self, PyObject *args) {
    Py_buffer buf;
    int with_ts;
    Column cols[6] = {{"offsets", 'q', NULL}, {"timestamps", 'q', NULL}, {"key_pos", 'q', NULL},
                      {"key_len", 'q', NULL}, {"value_pos", 'q', NULL},  {"value_len", 'q', NULL}};
    if (!PyArg_ParseTuple(args, "y*OOOOOOp:digest_stream", &buf, &cols[0].obj, &cols[1].obj, &cols[2].obj,
                          &cols[3].obj, &cols[4].obj, &cols[5].obj, &with_ts))
        return NULL;
    Py_ssize_t n = 0;
    if (acquire_columns(cols, 6, &n) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *O = cols[0].view.buf, *T = cols[1].view.buf, *KP = cols[2].view.buf, *KL = cols[3].view.buf,
                  *VP = cols[4].view.buf, *VL = cols[5].view.buf;
    const uint8_t *src = buf.buf;
    PyObject *result = NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if ((KL[i] >= 0 && !piece_inside(KP[i], KL[i], buf.len, 0)) ||
            (VL[i] >= 0 && !piece_inside(VP[i], VL[i], buf.len, 0))) {
            PyErr_Format(PyExc_ValueError,
                         "record %zd: key [%lld, +%lld) or value [%lld, +%lld) is not inside the %zd-byte buffer", i,
                         (long long)KP[i], (long long)KL[i], (long long)VP[i], (long long)VL[i], buf.len);
            goto done;
        }
        if (KL[i] > INT32_MAX || VL[i] > INT32_MAX) {
            PyErr_Format(PyExc_OverflowError, "record %zd: a key or value longer than an int32 length", i);
            goto done;
        }
        if (add_size(&total, 8 + (with_ts ? 8 : 0) + (KL[i] < 0 ? 1 : 5 + KL[i]) + (VL[i] < 0 ? 1 : 5 + VL[i]) + 4) <
            0)
            goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, total);
    if (result == NULL) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *out_end = o + total;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t kp = KP[i], kl = KL[i], vp = VP[i], vl = VL[i];
        if ((kl >= 0 && (!piece_inside(kp, kl, buf.len, 0) || kl > INT32_MAX)) ||
            (vl >= 0 && (!piece_inside(vp, vl, buf.len, 0) || vl > INT32_MAX)) ||
            8 + (with_ts ? 8 : 0) + (kl < 0 ? 1 : 5 + kl) + (vl < 0 ? 1 : 5 + vl) + 4 > out_end - o) {
            changed = 1;
            break;
        }
        o = put64(o, O[i]);
        if (with_ts) o = put64(o, T[i]);
        if (kl < 0) {
            *o++ = 1;
        } else {
            *o++ = 0;
            o = put32(o, (int32_t)kl);
            if (kl) memcpy(o, src + kp, (size_t)kl);
            o += kl;
        }
        if (vl < 0) {
            *o++ = 1;
        } else {
            *o++ = 0;
            o = put32(o, (int32_t)vl);
            if (vl) memcpy(o, src + vp, (size_t)vl);
            o += vl;
        }
        o = put32(o, 0);
    }
    Py_END_ALLOW_THREADS
    if (changed || o != out_end) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        Py_CLEAR(result);
    }
done:
    release_columns(cols, 6);
    PyBuffer_Release(&buf);
    return result;
}

/* --- the columnar v2 decoder ---------------------------------------------------------------------------------- */

static inline int get_varint(const uint8_t **pp, const uint8_t *end, int64_t *out, int max_bytes) {
    uint64_t raw = 0;
    int shift = 0;
    const uint8_t *p = *pp;
    for (int i = 0; i < max_bytes; i++) {
        if (p >= end) return -1;
        uint8_t b = *p++;
        raw |= (uint64_t)(b & 0x7f) << shift;
        if (b < 0x80) {
            *out = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            *pp = p;
            return 0;
        }
        shift += 7;
    }
    return -1;
}

enum { V2_DECODED = 0, V2_DEFER = 1, V2_MALFORMED = 2 };
#define V2_HEADER 61
#define V2_MIN_RECORD 7 /* length, attributes, timestamp delta, offset delta, key, value, header count: 1 byte each */

/* Records to reserve for the batch of `size` bytes at b, or -1 if it is not decoded here (compressed, a negative
 * count, too small, or a count its bytes cannot hold): the count is never trusted beyond what the bytes can hold. */
static inline int64_t v2_capacity(const uint8_t *b, int64_t size) {
    if (size < V2_HEADER) return -1;
    int32_t count = be32(b + 57);
    if ((b[22] & 7) != 0 || count < 0 || count > (size - V2_HEADER) / V2_MIN_RECORD) return -1;
    return count;
}

/* v2_records(buffer, positions, sizes) -> (status, counts, offsets, timestamps, key_pos, key_len, value_pos,
 * value_len): the records of uncompressed v2 batches. status per batch: 0 decoded, 1 has headers, is compressed or
 * has a negative count (decode it in Python), 2 malformed (decode it in Python to raise the precise error). The
 * record columns hold the records of the batches with status 0 only. */
static PyObject *v2_decode(PyObject *args, int checked) {
    Py_buffer buf;
    Column batch_cols[2] = {{"positions", 'q', NULL}, {"sizes", 'q', NULL}};
    if (!PyArg_ParseTuple(args, checked ? "y*OO:v2_batches" : "y*OO:v2_records", &buf, &batch_cols[0].obj,
                          &batch_cols[1].obj))
        return NULL;
    Py_ssize_t nb = 0;
    if (acquire_columns(batch_cols, 2, &nb) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *P = batch_cols[0].view.buf, *S = batch_cols[1].view.buf;
    const uint8_t *src = buf.buf;
    PyObject *status = NULL, *counts = NULL, *cols[6] = {NULL, NULL, NULL, NULL, NULL, NULL}, *result = NULL;
    PyObject *lasts = NULL, *maxes = NULL;
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        if (!piece_inside(P[i], S[i], buf.len, 0)) {
            PyErr_Format(PyExc_ValueError, "batch %zd [%lld, +%lld) is not inside the %zd-byte buffer", i,
                         (long long)P[i], (long long)S[i], buf.len);
            goto done;
        }
        int64_t capacity = v2_capacity(src + P[i], S[i]);
        if (capacity > 0) total += capacity; /* at most buf.len / 7 in all: no overflow */
    }
    status = PyBytes_FromStringAndSize(NULL, nb);
    counts = PyBytes_FromStringAndSize(NULL, nb * 8);
    if (status == NULL || counts == NULL) goto done;
    if (checked) {
        lasts = PyBytes_FromStringAndSize(NULL, nb * 8);
        maxes = PyBytes_FromStringAndSize(NULL, nb * 8);
        if (lasts == NULL || maxes == NULL) goto done;
    }
    for (int c = 0; c < 6; c++)
        if ((cols[c] = PyBytes_FromStringAndSize(NULL, total * 8)) == NULL) goto done;
    uint8_t *ST = (uint8_t *)PyBytes_AS_STRING(status);
    int64_t *CN = (int64_t *)PyBytes_AS_STRING(counts), *C[6];
    int64_t *LO = checked ? (int64_t *)PyBytes_AS_STRING(lasts) : NULL;
    int64_t *MX = checked ? (int64_t *)PyBytes_AS_STRING(maxes) : NULL;
    for (int c = 0; c < 6; c++) C[c] = (int64_t *)PyBytes_AS_STRING(cols[c]);
    Py_ssize_t r = 0;
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < nb; i++) {
        int64_t at = P[i], size = S[i];
        if (!piece_inside(at, size, buf.len, 0)) {
            changed = 1;
            break;
        }
        const uint8_t *b = src + at, *end = b + size;
        if (i + 4 < nb) { /* a hint, for a position inside the buffer only (another could overflow the pointer) */
            int64_t ahead = P[i + 4];
            if (ahead >= 0 && ahead < (int64_t)buf.len) __builtin_prefetch(src + ahead);
        }
        CN[i] = 0;
        if (checked) LO[i] = MX[i] = 0;
        if (size < V2_HEADER) {
            ST[i] = V2_MALFORMED;
            continue;
        }
        if (checked) {
            /* the batch's own header: last offset (Java long arithmetic) and max timestamp; then its CRC-32C */
            LO[i] = (int64_t)((uint64_t)be64(b) + (uint64_t)(int64_t)be32(b + 23));
            MX[i] = be64(b + 35);
            if ((uint32_t)be32(b + 17) != crc32c(b + 21, size - 21)) {
                ST[i] = V2_MALFORMED;
                continue;
            }
        }
        const uint8_t *p = b + V2_HEADER;
        int16_t attributes = (int16_t)(b[21] << 8 | b[22]);
        int32_t count = be32(b + 57), last_delta = be32(b + 23);
        if ((attributes & 7) != 0 || count < 0) {
            ST[i] = V2_DEFER;
            continue;
        }
        /* the columns hold `total` records, reserved from the counts the checking pass read: no more fit */
        if (v2_capacity(b, size) < 0 || last_delta < 0 || count > total - r) {
            ST[i] = V2_MALFORMED;
            continue;
        }
        int64_t base = be64(b), base_ts = be64(b + 27), max_ts = be64(b + 35), previous_delta = -1;
        Py_ssize_t r0 = r;
        ST[i] = V2_DECODED;
        for (int32_t k = 0; k < count && ST[i] == V2_DECODED; k++) {
            int64_t length, tsd, od, kl, vl, hc;
            if (get_varint(&p, end, &length, 5) || length < 6 || length > end - p) {
                ST[i] = V2_MALFORMED;
                break;
            }
            const uint8_t *rend = p + length;
            p++; /* record attributes: unused */
            if (get_varint(&p, rend, &tsd, 10) || get_varint(&p, rend, &od, 5) || get_varint(&p, rend, &kl, 5) ||
                kl < -1 || (kl > 0 && kl > rend - p)) {
                ST[i] = V2_MALFORMED;
                break;
            }
            /* the reader's offset rules: inside base..base + lastOffsetDelta, strictly increasing, an int64 */
            if (od <= previous_delta || od > last_delta || base > INT64_MAX - od) {
                ST[i] = V2_MALFORMED;
                break;
            }
            previous_delta = od;
            C[2][r] = p - src;
            C[3][r] = kl;
            p += kl > 0 ? kl : 0;
            if (get_varint(&p, rend, &vl, 5) || vl < -1 || (vl > 0 && vl > rend - p)) {
                ST[i] = V2_MALFORMED;
                break;
            }
            C[4][r] = p - src;
            C[5][r] = vl;
            p += vl > 0 ? vl : 0;
            if (get_varint(&p, rend, &hc, 5)) {
                ST[i] = V2_MALFORMED;
                break;
            }
            if (hc != 0) {
                ST[i] = V2_DEFER;
                break;
            }
            if (p != rend) {
                ST[i] = V2_MALFORMED;
                break;
            }
            C[0][r] = base + od;
            /* Java long arithmetic: a timestamp delta may have wrapped on write */
            C[1][r] = (attributes & 0x08) ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)tsd);
            r++;
        }
        if (ST[i] == V2_DECODED && p != end) ST[i] = V2_MALFORMED;
        if (ST[i] != V2_DECODED) {
            r = r0;
            continue;
        }
        CN[i] = r - r0;
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        goto done;
    }
    if (r < total) {
        /* some batches were not decoded: hand back exactly the records that were */
        for (int c = 0; c < 6; c++) {
            PyObject *exact = PyBytes_FromStringAndSize(PyBytes_AS_STRING(cols[c]), r * 8);
            if (exact == NULL) goto done;
            Py_DECREF(cols[c]);
            cols[c] = exact;
        }
    }
    if (checked)
        result = PyTuple_Pack(10, status, counts, lasts, maxes, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]);
    else
        result = PyTuple_Pack(8, status, counts, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5]);
done:
    Py_XDECREF(status);
    Py_XDECREF(counts);
    Py_XDECREF(lasts);
    Py_XDECREF(maxes);
    for (int c = 0; c < 6; c++) Py_XDECREF(cols[c]);
    release_columns(batch_cols, 2);
    PyBuffer_Release(&buf);
    return result;
}

static PyObject *v2_records(PyObject *self, PyObject *args) { return v2_decode(args, 0); }

/* v2_batches(buffer, positions, sizes) -> (status, counts, last_offsets, max_timestamps, offsets, timestamps,
 * key_pos, key_len, value_pos, value_len): v2_records, and also the CRC-32C of every batch (a mismatch is status 2,
 * malformed) and each batch's last offset and max timestamp from its header (0 for a batch shorter than one). What
 * a verifier reads of a converted segment, in one pass over each batch. */
static PyObject *v2_batches(PyObject *self, PyObject *args) { return v2_decode(args, 1); }

/* --- uncompressed legacy messages ------------------------------------------------------------------------------ */

/* legacy_run(buffer, positions, sizes) -> (status, offsets, crcs, timestamps, key_pos, key_len, value_pos, value_len,
 * magics, attributes): the fields of uncompressed magic 0/1 messages (entries of `sizes` bytes at `positions`, log
 * overhead included). status per message: 0 read and its CRC-32 matches; 1 anything else (short, compressed, magic
 * above 1, a bad CRC, a key or value that does not fit): read it with the reference to raise the precise error.
 * Columns of a status-1 message hold whatever was read before the problem, zeros after. */
static PyObject *legacy_run(PyObject *self, PyObject *args) {
    Py_buffer buf;
    Column in[2] = {{"positions", 'q', NULL}, {"sizes", 'q', NULL}};
    if (!PyArg_ParseTuple(args, "y*OO:legacy_run", &buf, &in[0].obj, &in[1].obj)) return NULL;
    Py_ssize_t n = 0;
    if (acquire_columns(in, 2, &n) < 0) {
        PyBuffer_Release(&buf);
        return NULL;
    }
    const int64_t *P = in[0].view.buf, *S = in[1].view.buf;
    const uint8_t *src = buf.buf;
    PyObject *status = NULL, *cols[9] = {NULL}, *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!piece_inside(P[i], S[i], buf.len, 0)) {
            PyErr_Format(PyExc_ValueError, "message %zd [%lld, +%lld) is not inside the %zd-byte buffer", i,
                         (long long)P[i], (long long)S[i], buf.len);
            goto done;
        }
    }
    status = PyBytes_FromStringAndSize(NULL, n);
    if (status == NULL) goto done;
    for (int c = 0; c < 9; c++)
        if ((cols[c] = PyBytes_FromStringAndSize(NULL, n * 8)) == NULL) goto done;
    uint8_t *ST = (uint8_t *)PyBytes_AS_STRING(status);
    int64_t *O = (int64_t *)PyBytes_AS_STRING(cols[0]), *CR = (int64_t *)PyBytes_AS_STRING(cols[1]),
            *TS = (int64_t *)PyBytes_AS_STRING(cols[2]), *KP = (int64_t *)PyBytes_AS_STRING(cols[3]),
            *KL = (int64_t *)PyBytes_AS_STRING(cols[4]), *VP = (int64_t *)PyBytes_AS_STRING(cols[5]),
            *VL = (int64_t *)PyBytes_AS_STRING(cols[6]), *MG = (int64_t *)PyBytes_AS_STRING(cols[7]),
            *AT = (int64_t *)PyBytes_AS_STRING(cols[8]);
    int changed = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t at = P[i], size = S[i];
        if (!piece_inside(at, size, buf.len, 0)) {
            changed = 1;
            break;
        }
        const uint8_t *b = src + at;
        if (i + 4 < n) { /* a hint, for a position inside the buffer only (another could overflow the pointer) */
            int64_t ahead = P[i + 4];
            if (ahead >= 0 && ahead < (int64_t)buf.len) __builtin_prefetch(src + ahead);
        }
        ST[i] = 1;
        O[i] = CR[i] = TS[i] = KP[i] = KL[i] = VP[i] = VL[i] = MG[i] = AT[i] = 0;
        if (size < 26) continue; /* shorter than a magic 0 message's fixed fields */
        MG[i] = b[16];
        AT[i] = b[17];
        O[i] = be64(b);
        CR[i] = (uint32_t)be32(b + 12);
        int magic = b[16];
        if (magic > 1 || (b[17] & 7) != 0 || size < (magic ? 34 : 26)) continue;
        if (crc32_ieee(b + 16, size - 16) != (uint32_t)CR[i]) continue;
        TS[i] = magic ? be64(b + 18) : -1;
        int64_t key_at = magic ? 26 : 18; /* within the fixed fields */
        int64_t kl = be32(b + key_at);
        KL[i] = kl;
        KP[i] = at + key_at + 4;
        int64_t value_at = key_at + 4 + (kl > 0 ? kl : 0);
        if (kl < -1 || value_at + 4 > size) continue;
        int64_t vl = be32(b + value_at);
        VL[i] = vl;
        VP[i] = at + value_at + 4;
        if (vl < -1 || value_at + 4 + (vl > 0 ? vl : 0) != size) continue;
        ST[i] = 0;
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        goto done;
    }
    result = PyTuple_Pack(10, status, cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8]);
done:
    Py_XDECREF(status);
    for (int c = 0; c < 9; c++) Py_XDECREF(cols[c]);
    release_columns(in, 2);
    PyBuffer_Release(&buf);
    return result;
}

/* --- index entries: LogSegment.recover's rule ------------------------------------------------------------------ */

/* index_entries(sizes, last_offsets, max_timestamps, interval, valid_bytes, last_index_entry, max_timestamp,
 *               offset_of_max_timestamp, last_time_timestamp)
 *   -> (offset_entries, time_entries, valid_bytes, last_index_entry, max_timestamp, offset_of_max_timestamp,
 *       last_time_timestamp)
 * Batches written back to back from valid_bytes on, fed through Kafka's recovery loop: per batch the max timestamp
 * so far (and the last offset of the first batch that reached it) is updated, and once more than `interval` bytes
 * lie between the batch's start and the last index entry, an offset-index entry (last offset, start position) is
 * added, with a time-index entry (max so far, its offset) when the max grew past the last time entry. Entries come
 * back as native int64 pairs; the state after the last batch comes back so the next call continues from it. */
static PyObject *index_entries(PyObject *self, PyObject *args) {
    Column cols[3] = {{"sizes", 'q', NULL}, {"last_offsets", 'q', NULL}, {"max_timestamps", 'q', NULL}};
    long long interval, valid, last_entry, max_ts, off_of_max, last_time_ts;
    if (!PyArg_ParseTuple(args, "OOOLLLLLL:index_entries", &cols[0].obj, &cols[1].obj, &cols[2].obj, &interval,
                          &valid, &last_entry, &max_ts, &off_of_max, &last_time_ts))
        return NULL;
    if (valid < 0 || last_entry < 0 || last_entry > valid) {
        PyErr_Format(PyExc_ValueError, "index state: last entry %lld must lie in 0..valid bytes %lld",
                     last_entry, valid);
        return NULL;
    }
    Py_ssize_t n = 0;
    if (acquire_columns(cols, 3, &n) < 0) return NULL;
    const int64_t *S = cols[0].view.buf, *L = cols[1].view.buf, *M = cols[2].view.buf;
    PyObject *offsets = NULL, *times = NULL, *result = NULL;
    int64_t *off_buf = NULL, *time_buf = NULL;
    /* checking pass: no negative size, and the end of the last batch fits an int64 (so no sum below overflows) */
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (S[i] < 0) {
            PyErr_Format(PyExc_ValueError, "batch %zd has a negative size %lld", i, (long long)S[i]);
            goto done;
        }
        if (S[i] > INT64_MAX - valid - total) {
            PyErr_SetString(PyExc_OverflowError, "batches end beyond an int64 byte position");
            goto done;
        }
        total += S[i];
    }
    /* entries lie more than `interval` bytes apart inside [valid, valid + total]: that many at most */
    Py_ssize_t cap = n;
    if (interval >= 0 && interval < total && total / (interval + 1) < (int64_t)cap - 1)
        cap = (Py_ssize_t)(total / (interval + 1) + 1); /* < cap here: no overflow */
    else if (interval >= total && cap > 1)
        cap = 1;
    off_buf = PyMem_Malloc((size_t)(cap ? cap : 1) * 16);
    time_buf = PyMem_Malloc((size_t)(cap ? cap : 1) * 16);
    if (off_buf == NULL || time_buf == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    Py_ssize_t no = 0, nt = 0;
    int changed = 0;
    int64_t end = valid + total; /* no overflow: checked above */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = S[i];
        if (size < 0 || size > end - valid) {
            changed = 1;
            break;
        }
        if (M[i] > max_ts) {
            max_ts = M[i];
            off_of_max = L[i];
        }
        /* valid >= last_entry >= 0: the difference cannot overflow */
        if (valid - last_entry > interval) {
            if (no >= (cap ? cap : 1)) { /* the sizes summed to more entries than were allocated: they changed */
                changed = 1;
                break;
            }
            off_buf[2 * no] = L[i];
            off_buf[2 * no + 1] = valid;
            no++;
            if (max_ts > last_time_ts) {
                time_buf[2 * nt] = max_ts;
                time_buf[2 * nt + 1] = off_of_max;
                nt++;
                last_time_ts = max_ts;
            }
            last_entry = valid;
        }
        valid += size;
    }
    Py_END_ALLOW_THREADS
    if (changed) {
        PyErr_SetString(PyExc_RuntimeError, CHANGED_UNDER_US);
        goto done;
    }
    offsets = PyBytes_FromStringAndSize((const char *)off_buf, no * 16);
    times = PyBytes_FromStringAndSize((const char *)time_buf, nt * 16);
    if (offsets == NULL || times == NULL) goto done;
    result = Py_BuildValue("(OOLLLLL)", offsets, times, (long long)valid, (long long)last_entry, (long long)max_ts,
                           (long long)off_of_max, (long long)last_time_ts);
done:
    Py_XDECREF(offsets);
    Py_XDECREF(times);
    PyMem_Free(off_buf);
    PyMem_Free(time_buf);
    release_columns(cols, 3);
    return result;
}

static PyMethodDef methods[] = {
    {"index_entries", index_entries, METH_VARARGS, "offset- and time-index entries of batches (LogSegment.recover)"},
    {"v2_records", v2_records, METH_VARARGS, "records of uncompressed v2 batches, as columns"},
    {"v2_batches", v2_batches, METH_VARARGS, "v2_records with CRC-32C checks and each batch's header fields"},
    {"legacy_run", legacy_run, METH_VARARGS, "fields of uncompressed magic 0/1 messages, CRC-32 checked"},
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
    have_pclmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
#endif
    return PyModule_Create(&module);
}
