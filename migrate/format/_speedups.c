/* Hot loops of the format layer in C: the entry walk, CRC-32 and CRC-32C over many ranges, the single-record v2
 * batch encoder, the content-digest serialization, the columnar v2 record decoder, a small legacy segment's whole
 * conversion and a small v2 segment's whole read-back. Each has a Python twin in the format modules (the reference,
 * used when this module is not built or is switched off, see accel.py; the whole conversion's twin is
 * migrate.segment.convert's general path, the whole read-back's migrate.segment.verify's); tests check both give
 * identical results. No Python objects per record: arrays in, bytes out.
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
 * writing out of bounds. small_legacy_v2 and small_v2_records alone hold the GIL: each takes one small buffer, whose
 * work is short, and so nothing it reads can change under it. */
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

/* One single-record batch of `size` bytes (61 + the body's varint + the body, as single_record_body sizes it) at o:
 * the record's key and value are [kp, +kl) and [vp, +vl) of src (a length of -1 is null), inside src (the caller
 * checked). Returns the end of the batch. */
static inline uint8_t *put_single_record_batch(uint8_t *o, const uint8_t *src, int64_t size, int32_t leader_epoch,
                                               int64_t offset, int64_t timestamp, int64_t timestamp_type,
                                               uint8_t record_attributes, int64_t kp, int64_t kl, int64_t vp,
                                               int64_t vl) {
    uint8_t *start = o;
    int64_t body = single_record_body(kl, vl);
    int64_t k = kl > 0 ? kl : 0, v = vl > 0 ? vl : 0;
    o = put64(o, offset);
    o = put32(o, (int32_t)(size - 12));
    o = put32(o, leader_epoch);
    *o++ = 2;
    uint8_t *crc_at = o;
    o += 4;
    o = put16(o, timestamp_type == 1 ? 0x08 : 0);
    o = put32(o, 0);
    o = put64(o, timestamp);
    o = put64(o, timestamp);
    o = put64(o, -1);
    o = put16(o, -1);
    o = put32(o, -1);
    o = put32(o, 1);
    o = put_varint(o, body);
    *o++ = record_attributes;
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
    return o;
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
        int64_t kp = KP[i], kl = KL[i], vp = VP[i], vl = VL[i];
        int64_t body = single_record_body(kl, vl);
        /* S is ours; the key and value must still be where they were and size this batch as they did */
        if (!piece_inside(kp, kl, buf.len, 1) || !piece_inside(vp, vl, buf.len, 1) ||
            61 + varint_size(body) + body != S[i]) {
            changed = 1;
            break;
        }
        o = put_single_record_batch(o, src, S[i], leader_epoch, O[i], T[i], TY[i], RA[i], kp, kl, vp, vl);
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

/* The bytes one record takes in the serialization, and the record written at o (its key and value inside src, the
 * caller checked; a negative length is null): offset, the timestamp if with_ts, key, value, header count 0. */
static inline int64_t digest_record_size(int with_ts, int64_t kl, int64_t vl) {
    return 8 + (with_ts ? 8 : 0) + (kl < 0 ? 1 : 5 + kl) + (vl < 0 ? 1 : 5 + vl) + 4;
}

static inline uint8_t *put_digest_record(uint8_t *o, const uint8_t *src, int with_ts, int64_t offset,
                                         int64_t timestamp, int64_t kp, int64_t kl, int64_t vp, int64_t vl) {
    o = put64(o, offset);
    if (with_ts) o = put64(o, timestamp);
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
    return put32(o, 0);
}

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
        if (add_size(&total, digest_record_size(with_ts, KL[i], VL[i])) < 0) goto done;
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
            digest_record_size(with_ts, kl, vl) > out_end - o) {
            changed = 1;
            break;
        }
        o = put_digest_record(o, src, with_ts, O[i], T[i], kp, kl, vp, vl);
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

/* The records of the v2 batch of `size` bytes at b (inside src) appended to the columns C (offsets, timestamps,
 * key_pos, key_len, value_pos, value_len) from row *r, which has room for total - *r more: V2_DECODED (and *r moved
 * past them), V2_DEFER (compressed, a negative count or a record with headers) or V2_MALFORMED (*r left where it
 * was). `checked`: the batch's CRC-32C is checked first, and *last_offset and *max_timestamp are read from its
 * header (0 for a batch too short to have one). */
static inline int v2_batch_records(const uint8_t *src, const uint8_t *b, int64_t size, int checked, int64_t *C[6],
                                   Py_ssize_t *r_at, Py_ssize_t total, int64_t *last_offset, int64_t *max_timestamp) {
    const uint8_t *end = b + size;
    *last_offset = *max_timestamp = 0;
    if (size < V2_HEADER) return V2_MALFORMED;
    if (checked) {
        /* the batch's own header: last offset (Java long arithmetic) and max timestamp; then its CRC-32C */
        *last_offset = (int64_t)((uint64_t)be64(b) + (uint64_t)(int64_t)be32(b + 23));
        *max_timestamp = be64(b + 35);
        if ((uint32_t)be32(b + 17) != crc32c(b + 21, size - 21)) return V2_MALFORMED;
    }
    const uint8_t *p = b + V2_HEADER;
    int16_t attributes = (int16_t)(b[21] << 8 | b[22]);
    int32_t count = be32(b + 57), last_delta = be32(b + 23);
    if ((attributes & 7) != 0 || count < 0) return V2_DEFER;
    Py_ssize_t r = *r_at;
    /* the columns hold `total` records, reserved from the counts the checking pass read: no more fit */
    if (v2_capacity(b, size) < 0 || last_delta < 0 || count > total - r) return V2_MALFORMED;
    int64_t base = be64(b), base_ts = be64(b + 27), max_ts = be64(b + 35), previous_delta = -1;
    for (int32_t k = 0; k < count; k++) {
        int64_t length, tsd, od, kl, vl, hc;
        if (get_varint(&p, end, &length, 5) || length < 6 || length > end - p) return V2_MALFORMED;
        const uint8_t *rend = p + length;
        p++; /* record attributes: unused */
        if (get_varint(&p, rend, &tsd, 10) || get_varint(&p, rend, &od, 5) || get_varint(&p, rend, &kl, 5) ||
            kl < -1 || (kl > 0 && kl > rend - p))
            return V2_MALFORMED;
        /* the reader's offset rules: inside base..base + lastOffsetDelta, strictly increasing, an int64 */
        if (od <= previous_delta || od > last_delta || base > INT64_MAX - od) return V2_MALFORMED;
        previous_delta = od;
        C[2][r] = p - src;
        C[3][r] = kl;
        p += kl > 0 ? kl : 0;
        if (get_varint(&p, rend, &vl, 5) || vl < -1 || (vl > 0 && vl > rend - p)) return V2_MALFORMED;
        C[4][r] = p - src;
        C[5][r] = vl;
        p += vl > 0 ? vl : 0;
        if (get_varint(&p, rend, &hc, 5)) return V2_MALFORMED;
        if (hc != 0) return V2_DEFER;
        if (p != rend) return V2_MALFORMED;
        C[0][r] = base + od;
        /* Java long arithmetic: a timestamp delta may have wrapped on write */
        C[1][r] = (attributes & 0x08) ? max_ts : (int64_t)((uint64_t)base_ts + (uint64_t)tsd);
        r++;
    }
    if (p != end) return V2_MALFORMED;
    *r_at = r;
    return V2_DECODED;
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
        const uint8_t *b = src + at;
        if (i + 4 < nb) { /* a hint, for a position inside the buffer only (another could overflow the pointer) */
            int64_t ahead = P[i + 4];
            if (ahead >= 0 && ahead < (int64_t)buf.len) __builtin_prefetch(src + ahead);
        }
        int64_t last = 0, max = 0;
        Py_ssize_t r0 = r;
        ST[i] = (uint8_t)v2_batch_records(src, b, size, checked, C, &r, total, &last, &max);
        if (checked) {
            LO[i] = last;
            MX[i] = max;
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

/* One uncompressed magic 0/1 message: its fields, as legacy_run gives them. */
typedef struct {
    int64_t offset, crc, timestamp, key_pos, key_len, value_pos, value_len, magic, attributes;
} LegacyFields;

/* The message of `size` bytes (its 12-byte log overhead included) at `at` of src, which the caller checked lies
 * inside: 0 when it is sound (read, its CRC-32 matches, the key and value fill it exactly), else 1 (short,
 * compressed, magic above 1, a bad CRC, a key or value that does not fit), f then holding what was read before the
 * problem and zeros after. */
static inline int legacy_fields(const uint8_t *src, int64_t at, int64_t size, LegacyFields *f) {
    const uint8_t *b = src + at;
    memset(f, 0, sizeof *f);
    if (size < 26) return 1; /* shorter than a magic 0 message's fixed fields */
    f->magic = b[16];
    f->attributes = b[17];
    f->offset = be64(b);
    f->crc = (uint32_t)be32(b + 12);
    int magic = b[16];
    if (magic > 1 || (b[17] & 7) != 0 || size < (magic ? 34 : 26)) return 1;
    if (crc32_ieee(b + 16, size - 16) != (uint32_t)f->crc) return 1;
    f->timestamp = magic ? be64(b + 18) : -1;
    int64_t key_at = magic ? 26 : 18; /* within the fixed fields */
    int64_t kl = be32(b + key_at);
    f->key_len = kl;
    f->key_pos = at + key_at + 4;
    int64_t value_at = key_at + 4 + (kl > 0 ? kl : 0);
    if (kl < -1 || value_at + 4 > size) return 1;
    int64_t vl = be32(b + value_at);
    f->value_len = vl;
    f->value_pos = at + value_at + 4;
    if (vl < -1 || value_at + 4 + (vl > 0 ? vl : 0) != size) return 1;
    return 0;
}

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
        if (i + 4 < n) { /* a hint, for a position inside the buffer only (another could overflow the pointer) */
            int64_t ahead = P[i + 4];
            if (ahead >= 0 && ahead < (int64_t)buf.len) __builtin_prefetch(src + ahead);
        }
        LegacyFields f;
        ST[i] = (uint8_t)legacy_fields(src, at, size, &f);
        O[i] = f.offset;
        CR[i] = f.crc;
        TS[i] = f.timestamp;
        KP[i] = f.key_pos;
        KL[i] = f.key_len;
        VP[i] = f.value_pos;
        VL[i] = f.value_len;
        MG[i] = f.magic;
        AT[i] = f.attributes;
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
/* The loop's state between batches (index_entries' arguments and results). */
typedef struct {
    int64_t valid, last_entry, max_ts, off_of_max, last_time_ts;
} IndexState;

/* One batch of `size` bytes through the loop: 1 when it adds an offset-index entry (its last offset, then s->valid
 * before the batch) and *time_entry = 1 when a time-index entry (s->max_ts, s->off_of_max) comes with it. The
 * caller keeps s->valid >= s->last_entry >= 0 and s->valid + size within int64. */
static inline int index_step(IndexState *s, int64_t size, int64_t last_offset, int64_t max_timestamp,
                             int64_t interval, int *time_entry) {
    int entry = 0;
    *time_entry = 0;
    if (max_timestamp > s->max_ts) {
        s->max_ts = max_timestamp;
        s->off_of_max = last_offset;
    }
    if (s->valid - s->last_entry > interval) { /* valid >= last_entry >= 0: the difference cannot overflow */
        entry = 1;
        if (s->max_ts > s->last_time_ts) {
            *time_entry = 1;
            s->last_time_ts = s->max_ts;
        }
        s->last_entry = s->valid;
    }
    s->valid += size;
    return entry;
}

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
    IndexState st = {valid, last_entry, max_ts, off_of_max, last_time_ts};
    int64_t end = valid + total; /* no overflow: checked above */
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t size = S[i], at = st.valid;
        if (size < 0 || size > end - st.valid) {
            changed = 1;
            break;
        }
        if (st.valid - st.last_entry > interval && no >= (cap ? cap : 1)) {
            changed = 1; /* the sizes summed to more entries than were allocated: they changed */
            break;
        }
        int time_entry;
        if (index_step(&st, size, L[i], M[i], interval, &time_entry)) {
            off_buf[2 * no] = L[i];
            off_buf[2 * no + 1] = at;
            no++;
            if (time_entry) {
                time_buf[2 * nt] = st.max_ts;
                time_buf[2 * nt + 1] = st.off_of_max;
                nt++;
            }
        }
    }
    Py_END_ALLOW_THREADS
    valid = st.valid;
    last_entry = st.last_entry;
    max_ts = st.max_ts;
    off_of_max = st.off_of_max;
    last_time_ts = st.last_time_ts;
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

/* --- a small legacy segment, whole ------------------------------------------------------------------------------ */

/* small_legacy_v2(buffer, base_offset, mtime_ms, mtime_policy, leader_epoch, tombstone_flag, index_interval,
 *                 max_message_bytes, segment_bytes_limit)
 *   -> None, or (log, offset_index, time_index, v0_messages, v1_messages, first_offset, last_offset,
 *                max_timestamp, source_stream, output_stream)
 * A whole segment file of uncompressed magic 0/1 messages converted the way migrate.segment.convert converts one
 * (one v2 batch per message, Kafka 4's cleaner), in one pass and one call: what the Python of a tiny segment's
 * conversion costs many times over. The .log's bytes; both index files as IndexBuilder.finish writes them
 * (LogSegment.recover's entries, the time index's roll entry); the count of messages of each magic; the first and
 * last offset; the largest output timestamp (-1 if none is larger); the digest serializations (digest_stream) of
 * the source records (no timestamps) and of the output records (with the timestamps written). v0 messages get
 * mtime_ms and LogAppendTime when mtime_policy, else CreateTime -1; v1 messages keep theirs; tombstone_flag sets
 * KIP-87's bit on a null value.
 *
 * None (convert it the general way, which also raises the precise error) for anything but the usual case: no
 * complete entry, an incomplete tail, an entry size below 14, a compressed message or magic 2 and above, a message
 * that legacy_fields refuses, offsets that do not strictly increase from base_offset within 2^31 - 1 of it, a
 * timestamp below -1, a batch over max_message_bytes that outgrew its message, more than segment_bytes_limit (or
 * int32) bytes of output. Runs holding the GIL, so no argument can change under it: a small buffer's work is short. */
static PyObject *small_legacy_v2(PyObject *self, PyObject *args) {
    Py_buffer buf;
    long long base, mtime_ms, interval, max_message, segment_limit;
    int mtime_policy, leader_epoch, tombstone_flag;
    if (!PyArg_ParseTuple(args, "y*LLpipLLL:small_legacy_v2", &buf, &base, &mtime_ms, &mtime_policy, &leader_epoch,
                          &tombstone_flag, &interval, &max_message, &segment_limit))
        return NULL;
    const uint8_t *src = buf.buf;
    Py_ssize_t end = buf.len, n = 0;
    PyObject *result = NULL, *log = NULL, *offsets_file = NULL, *times_file = NULL, *source = NULL, *output = NULL;
    LegacyFields *fields = NULL;
    int64_t *sizes = NULL, *stamps = NULL, *types = NULL;
    /* entries of at least 26 bytes (a sound message's fixed fields): at most end / 26 of them */
    Py_ssize_t cap = end / 26 + 1;
    fields = PyMem_Malloc((size_t)cap * sizeof(LegacyFields));
    sizes = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    stamps = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    types = PyMem_Malloc((size_t)cap * sizeof(int64_t));
    if (fields == NULL || sizes == NULL || stamps == NULL || types == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t v0 = 0, v1 = 0, max_ts = -1, total = 0, source_total = 0, output_total = 0;
    Py_ssize_t pos = 0;
    if (base < 0) goto fallback; /* a file name's offset is never negative; so no difference below overflows */
    while (end - pos >= 17) {
        int64_t size = (int64_t)be32(src + pos + 8) + 12;
        if (size < 26 || size > end - pos || n == cap) goto fallback;
        LegacyFields *f = &fields[n];
        if (legacy_fields(src, pos, size, f) != 0) goto fallback;
        if (n == 0 ? f->offset < base : f->offset <= fields[n - 1].offset) goto fallback;
        if (f->offset - base > INT32_MAX) goto fallback;
        if (f->magic == 0) {
            v0++;
            stamps[n] = mtime_policy ? mtime_ms : -1;
            types[n] = mtime_policy ? 1 : 0;
        } else {
            v1++;
            stamps[n] = f->timestamp;
            types[n] = (f->attributes & 0x08) ? 1 : 0;
        }
        if (stamps[n] < -1) goto fallback;
        if (stamps[n] > max_ts) max_ts = stamps[n];
        int64_t body = single_record_body(f->key_len, f->value_len);
        sizes[n] = 61 + varint_size(body) + body;
        if (sizes[n] > max_message && sizes[n] > size) goto fallback;
        total += sizes[n]; /* each at most a message's size plus a few bytes: no overflow below int32 */
        if (total > segment_limit || total > INT32_MAX) goto fallback;
        source_total += digest_record_size(0, f->key_len, f->value_len);
        output_total += digest_record_size(1, f->key_len, f->value_len);
        pos += (Py_ssize_t)size;
        n++;
    }
    if (n == 0 || pos != end) goto fallback;
    log = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    source = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)source_total);
    output = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)output_total);
    if (log == NULL || source == NULL || output == NULL) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(log), *so = (uint8_t *)PyBytes_AS_STRING(source),
            *oo = (uint8_t *)PyBytes_AS_STRING(output);
    /* at most one offset entry per batch, and one time entry per batch plus the roll entry */
    Py_ssize_t entries = 0, time_entries = 0;
    IndexState st = {0, 0, -1, -1, -1};
    uint8_t *offset_entries = PyMem_Malloc((size_t)n * 8), *time_index = PyMem_Malloc((size_t)(n + 1) * 12);
    if (offset_entries == NULL || time_index == NULL) {
        PyMem_Free(offset_entries);
        PyMem_Free(time_index);
        PyErr_NoMemory();
        goto done;
    }
    uint8_t *oe = offset_entries, *te = time_index;
    for (Py_ssize_t i = 0; i < n; i++) {
        const LegacyFields *f = &fields[i];
        uint8_t attributes = (tombstone_flag && f->value_len < 0) ? 0x20 : 0;
        int64_t at = st.valid;
        o = put_single_record_batch(o, src, sizes[i], leader_epoch, f->offset, stamps[i], types[i], attributes,
                                    f->key_pos, f->key_len, f->value_pos, f->value_len);
        so = put_digest_record(so, src, 0, f->offset, 0, f->key_pos, f->key_len, f->value_pos, f->value_len);
        oo = put_digest_record(oo, src, 1, f->offset, stamps[i], f->key_pos, f->key_len, f->value_pos, f->value_len);
        int time_entry;
        if (index_step(&st, sizes[i], f->offset, stamps[i], interval, &time_entry)) {
            oe = put32(oe, (int32_t)(f->offset - base));
            oe = put32(oe, (int32_t)at);
            entries++;
            if (time_entry) {
                te = put64(te, st.max_ts);
                te = put32(te, (int32_t)(st.off_of_max - base));
                time_entries++;
            }
        }
    }
    if (st.max_ts > st.last_time_ts) { /* the roll entry: the final max, when it grew since the last entry */
        te = put64(te, st.max_ts);
        te = put32(te, (int32_t)(st.off_of_max - base));
        time_entries++;
    }
    offsets_file = PyBytes_FromStringAndSize((const char *)offset_entries, entries * 8);
    times_file = PyBytes_FromStringAndSize((const char *)time_index, time_entries * 12);
    PyMem_Free(offset_entries);
    PyMem_Free(time_index);
    if (offsets_file == NULL || times_file == NULL) goto done;
    result = Py_BuildValue("(OOOLLLLLOO)", log, offsets_file, times_file, (long long)v0, (long long)v1,
                           (long long)fields[0].offset, (long long)fields[n - 1].offset, (long long)max_ts, source,
                           output);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(log);
    Py_XDECREF(offsets_file);
    Py_XDECREF(times_file);
    Py_XDECREF(source);
    Py_XDECREF(output);
    PyMem_Free(fields);
    PyMem_Free(sizes);
    PyMem_Free(stamps);
    PyMem_Free(types);
    PyBuffer_Release(&buf);
    return result;
}

/* --- a small v2 segment, read back whole --------------------------------------------------------------------- */

/* small_v2_records(buffer)
 *   -> None, or (positions, sizes, last_offsets, max_timestamps, records, digest_stream): a whole .log of complete,
 * uncompressed v2 batches without record headers, each CRC-32C checked and decoded as v2_batches decodes it: each
 * batch's position, size, last offset and max timestamp (bytes of int64), the number of records, and the records'
 * digest serialization with their timestamps (digest_stream). None (read it the general way, which also names the
 * problem) for anything else: no complete batch, an incomplete tail, an entry size below 14, magic other than 2, a
 * batch v2_batches would not decode here (compressed, headers, malformed). Holds the GIL, as small_legacy_v2. */
static PyObject *small_v2_records(PyObject *self, PyObject *args) {
    Py_buffer buf;
    if (!PyArg_ParseTuple(args, "y*:small_v2_records", &buf)) return NULL;
    const uint8_t *src = buf.buf;
    Py_ssize_t end = buf.len, nb = 0, total = 0, pos = 0;
    PyObject *result = NULL, *positions = NULL, *sizes = NULL, *lasts = NULL, *maxes = NULL, *stream = NULL;
    int64_t *walked = NULL, *cols = NULL;
    /* batches of at least 61 bytes: at most end / 61 of them; their positions, then their sizes */
    Py_ssize_t cap = end / V2_HEADER + 1;
    walked = PyMem_Malloc((size_t)cap * 2 * sizeof(int64_t));
    if (walked == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    while (end - pos >= 17) {
        int64_t size = (int64_t)be32(src + pos + 8) + 12;
        if (size < V2_HEADER || size > end - pos || nb == cap || src[pos + 16] != 2) goto fallback;
        int64_t capacity = v2_capacity(src + pos, size);
        if (capacity < 0) goto fallback;
        walked[nb] = pos;
        walked[cap + nb] = size;
        total += capacity; /* at most end / 7 in all */
        pos += (Py_ssize_t)size;
        nb++;
    }
    if (nb == 0 || pos != end) goto fallback;
    positions = PyBytes_FromStringAndSize((const char *)walked, nb * 8);
    sizes = PyBytes_FromStringAndSize((const char *)(walked + cap), nb * 8);
    lasts = PyBytes_FromStringAndSize(NULL, nb * 8);
    maxes = PyBytes_FromStringAndSize(NULL, nb * 8);
    cols = PyMem_Malloc((size_t)(total ? total : 1) * 6 * sizeof(int64_t));
    if (positions == NULL || sizes == NULL || lasts == NULL || maxes == NULL) goto done;
    if (cols == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t *L = (int64_t *)PyBytes_AS_STRING(lasts), *M = (int64_t *)PyBytes_AS_STRING(maxes), *C[6];
    for (int c = 0; c < 6; c++) C[c] = cols + (Py_ssize_t)c * (total ? total : 1);
    Py_ssize_t r = 0;
    int64_t stream_size = 0;
    for (Py_ssize_t i = 0; i < nb; i++) {
        Py_ssize_t r0 = r;
        if (v2_batch_records(src, src + walked[i], walked[cap + i], 1, C, &r, total, &L[i], &M[i]) != V2_DECODED)
            goto fallback;
        for (Py_ssize_t k = r0; k < r; k++) stream_size += digest_record_size(1, C[3][k], C[5][k]);
    }
    stream = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)stream_size);
    if (stream == NULL) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(stream);
    for (Py_ssize_t k = 0; k < r; k++)
        o = put_digest_record(o, src, 1, C[0][k], C[1][k], C[2][k], C[3][k], C[4][k], C[5][k]);
    result = Py_BuildValue("(OOOOnO)", positions, sizes, lasts, maxes, r, stream);
    goto done;
fallback:
    Py_INCREF(Py_None);
    result = Py_None;
done:
    Py_XDECREF(positions);
    Py_XDECREF(sizes);
    Py_XDECREF(lasts);
    Py_XDECREF(maxes);
    Py_XDECREF(stream);
    PyMem_Free(walked);
    PyMem_Free(cols);
    PyBuffer_Release(&buf);
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
    {"small_legacy_v2", small_legacy_v2, METH_VARARGS, "a small segment of plain legacy messages as v2, whole"},
    {"small_v2_records", small_v2_records, METH_VARARGS, "a small v2 segment's batches and records, whole"},
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
