/* The shared ground of _speedups.c, included by it (one translation unit, so everything stays static): the
 * checksum tables and their SSE4.2 / PCLMUL paths, big-endian reads, and the argument checks every entry point
 * runs first (buffer layout, item types, parallel lengths, positions and lengths inside their buffers). */
#ifndef KAFKA_LOG_MIGRATE_SPEEDUPS_BASE_H
#define KAFKA_LOG_MIGRATE_SPEEDUPS_BASE_H

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

/* CRC-32 (IEEE) by carry-less multiplication, for buffers of at least 64 bytes: four 128-bit lanes folded 64 bytes
 * at a time, then one lane 16 bytes at a time, then Barrett reduction (Gopal et al., "Fast CRC Computation for
 * Generic Polynomials Using PCLMULQDQ", Intel 2009; the bit-reflected constants of its appendix, as zlib's
 * crc32_simd uses them). What is left after the last 16-byte block goes through the table. A legacy message is
 * usually 60-1000 bytes, where this runs at several times the table's speed. */
#if defined(__x86_64__)
#include <immintrin.h>
static int have_pclmul = 0;
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc32_clmul(const uint8_t *buf, Py_ssize_t len) {
    static const uint64_t k1k2[2] __attribute__((aligned(16))) = {0x0154442bd4, 0x01c6e41596};
    static const uint64_t k3k4[2] __attribute__((aligned(16))) = {0x01751997d0, 0x00ccaa009e};
    static const uint64_t k5k0[2] __attribute__((aligned(16))) = {0x0163cd6124, 0x0000000000};
    static const uint64_t poly[2] __attribute__((aligned(16))) = {0x01db710641, 0x01f7011641};
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;
    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)0xffffffffu));
    x0 = _mm_load_si128((const __m128i *)k1k2);
    buf += 64;
    len -= 64;
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }
    x0 = _mm_load_si128((const __m128i *)k3k4);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);
    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x3 = _mm_setr_epi32(~0, 0, ~0, 0);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_loadl_epi64((const __m128i *)k5k0);
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, x3);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    x0 = _mm_load_si128((const __m128i *)poly);
    x2 = _mm_and_si128(x1, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, x3);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    uint32_t c = (uint32_t)_mm_extract_epi32(x1, 1); /* the running (inverted) CRC of the 16-byte blocks */
    while (len--) c = crc32_table[0][(c ^ *buf++) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}
#endif

/* CRC-32 (IEEE) of one buffer. */
static uint32_t crc32_ieee(const uint8_t *p, Py_ssize_t n) {
#if defined(__x86_64__)
    if (have_pclmul && n >= 64) return crc32_clmul(p, n);
#endif
    return crc_sliced(crc32_table, p, n);
}

static uint32_t crc32c(const uint8_t *p, Py_ssize_t n) {
#if defined(__x86_64__)
    if (have_sse42) return crc32c_hw(p, n);
#endif
    return crc_sliced(crc32c_table, p, n);
}

static inline int32_t be32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3]);
}

static inline int64_t be64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v = v << 8 | p[i];
    return (int64_t)v;
}

/* --- argument checking --------------------------------------------------------------------------------------- */

/* One array argument: 'q' = int64 items, 'B' = uint8 items. */
typedef struct {
    const char *name;
    char kind;
    PyObject *obj;
    Py_buffer view;
} Column;

static int native_little_endian(void) {
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

/* The struct-module item format of a buffer is this kind: numpy exports int64 as 'l' (LP64) or 'q', and may put a
 * byte-order prefix that names the native order. */
static int format_is(const char *format, Py_ssize_t itemsize, char kind) {
    const char *f = format ? format : "B";
    if (*f == '@' || *f == '=' || (*f == '<' && native_little_endian()) || ((*f == '>' || *f == '!') && !native_little_endian()))
        f++;
    if (f[0] == '\0' || f[1] != '\0') return 0;
    if (kind == 'B') return itemsize == 1 && f[0] == 'B';
    return itemsize == 8 && (f[0] == 'q' || f[0] == 'l');
}

static void release_columns(Column *cols, int count) {
    for (int c = 0; c < count; c++) PyBuffer_Release(&cols[c].view);
}

/* Acquire every column's buffer and check it; *length = their common number of items. On failure nothing stays
 * acquired and an exception is set. */
static int acquire_columns(Column *cols, int count, Py_ssize_t *length) {
    for (int c = 0; c < count; c++) memset(&cols[c].view, 0, sizeof(Py_buffer));
    for (int c = 0; c < count; c++) {
        Column *col = &cols[c];
        const char *want = col->kind == 'B' ? "uint8" : "int64";
        if (PyObject_GetBuffer(col->obj, &col->view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
            PyErr_Clear();  /* not a buffer, or a strided one: say which argument and what it must be */
            PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous 1-D %s array, not %.100s", col->name, want,
                         Py_TYPE(col->obj)->tp_name);
            goto fail;
        }
        if (col->view.ndim != 1) {
            PyErr_Format(PyExc_TypeError, "%s must be a 1-D %s array, not %d-D", col->name, want, col->view.ndim);
            goto fail;
        }
        if (!format_is(col->view.format, col->view.itemsize, col->kind)) {
            PyErr_Format(PyExc_TypeError, "%s must be a native-order %s array, not item format '%s'", col->name, want,
                         col->view.format ? col->view.format : "B");
            goto fail;
        }
        if ((uintptr_t)col->view.buf % (col->kind == 'B' ? 1 : _Alignof(int64_t)) != 0) {
            PyErr_Format(PyExc_ValueError, "%s is not aligned for %s items", col->name, want);
            goto fail;
        }
        Py_ssize_t n = col->view.shape ? col->view.shape[0] : col->view.len / col->view.itemsize;
        if (c == 0) {
            *length = n;
        } else if (n != *length) {
            PyErr_Format(PyExc_ValueError, "%s has %zd items but %s has %zd", col->name, n, cols[0].name, *length);
            goto fail;
        }
    }
    return 0;
fail:
    release_columns(cols, count);
    return -1;
}

/* A piece [pos, pos + len) of a buffer of `size` bytes; a negative `len` is null (allowed if allow_null) and has no
 * position. Written so that no sum can overflow. */
static inline int piece_inside(int64_t pos, int64_t len, Py_ssize_t size, int allow_null) {
    if (len < 0) return allow_null && len == -1;
    return pos >= 0 && len <= (int64_t)size && pos <= (int64_t)size - len;
}

#define CHANGED_UNDER_US "an argument changed while it was being read (another thread wrote to it)"

static int add_size(Py_ssize_t *total, int64_t more) {
    if (more < 0 || more > (int64_t)(PY_SSIZE_T_MAX - *total)) {
        PyErr_SetString(PyExc_OverflowError, "output would be larger than the largest bytes object");
        return -1;
    }
    *total += (Py_ssize_t)more;
    return 0;
}

#endif  /* KAFKA_LOG_MIGRATE_SPEEDUPS_BASE_H */
