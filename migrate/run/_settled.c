/* The settled-partition check of migrate/run/swap_status.py in C: status, and every verb's reconciliation before it
 * acts, ask it of 10^5-10^6 swapped segments, and in Python its text comparisons cost more than the stat calls.
 *
 * settled_scan(text, pos, prefix, known) -> (converted, original, [log edges]) | None | NotImplemented
 *
 * The same judgement as ``swap_status._scan_reference``, its Python twin (tests check both agree): from ``pos`` the
 * partition's swap record ``text`` must hold, for each (base, swap, piece) of ``known`` in order, the piece, then
 * 64 lowercase hex digits of log edges and '"}', segments separated by ',' and the record closed by ']}' after the
 * last; the result's text (between the swap and the log edges) must be an object's; each swap text must have
 * exactly the form swap_files_json writes:
 *
 *     [FILE(,FILE)*]
 *     FILE = {"suffix":"[A-Za-z0-9._-]*","original":(null|STAT),"output":STAT(,"base_offset":NUM)?}
 *     STAT = {"inode":NUM,"size":NUM,"mtime_ns":NUM}        NUM = -?(0|[1-9][0-9]*)
 *
 * and each file, named ``prefix`` + its base offset in 20 digits + suffix, must stat to an identity whose text in
 * STAT's form equals its output's (converted) or its original's (original). Anything else answers None: the caller
 * then asks partition_truth, which judges every case and says what it sees.
 *
 * Every argument may come from a file on disk (the record) or from the state database: every position and length
 * is checked against its string before it is read. Strings that are not ASCII answer NotImplemented (the caller
 * then runs the Python twin, which compares code points): records are written by json.dumps, ASCII only. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define NOT_SETTLED 0
#define SETTLED 1
#define NOT_ASCII 2

typedef struct {
    const char *s;
    Py_ssize_t n;
} Text;

static int ascii_of(PyObject *o, Text *t) {
    if (!PyUnicode_IS_COMPACT_ASCII(o)) return 0;
    t->s = (const char *)PyUnicode_DATA(o);
    t->n = PyUnicode_GET_LENGTH(o);
    return 1;
}

static int literal(const Text *t, Py_ssize_t *at, const char *word, Py_ssize_t n) {
    if (t->n - *at < n || memcmp(t->s + *at, word, (size_t)n) != 0) return 0;
    *at += n;
    return 1;
}
#define LIT(t, at, w) literal((t), (at), (w), (Py_ssize_t)(sizeof(w) - 1))

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* NUM; its value in *value when it fits in int64 (*fits says whether) */
static int number(const Text *t, Py_ssize_t *at, long long *value, int *fits) {
    Py_ssize_t k = *at;
    int negative = 0;
    if (k < t->n && t->s[k] == '-') {
        negative = 1;
        k++;
    }
    if (k >= t->n || !is_digit(t->s[k])) return 0;
    unsigned long long v = 0;
    int ok = 1;
    if (t->s[k] == '0') {
        k++;
    } else {
        for (; k < t->n && is_digit(t->s[k]); k++) {
            unsigned d = (unsigned)(t->s[k] - '0');
            if (v > (ULLONG_MAX - d) / 10) ok = 0;
            else v = v * 10 + d;
        }
    }
    if (ok && v > (unsigned long long)LLONG_MAX + (unsigned long long)negative) ok = 0;
    if (value != NULL) {
        *fits = ok;
        if (ok) *value = negative ? (long long)(0 - v) : (long long)v;
    }
    *at = k;
    return 1;
}

static int stat_text(const Text *t, Py_ssize_t *at) {
    return LIT(t, at, "{\"inode\":") && number(t, at, NULL, NULL) && LIT(t, at, ",\"size\":") &&
           number(t, at, NULL, NULL) && LIT(t, at, ",\"mtime_ns\":") && number(t, at, NULL, NULL) &&
           LIT(t, at, "}");
}

static int suffix_char(char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || is_digit(c) || c == '.' || c == '_' || c == '-';
}

/* int128 to decimal: a file's mtime in nanoseconds is seconds * 10^9 + nanoseconds, which Python computes exactly */
static int format_i128(char *out, size_t room, __int128 v) {
    char digits[48];
    int n = 0;
    unsigned __int128 u = v < 0 ? (unsigned __int128)0 - (unsigned __int128)v : (unsigned __int128)v;
    do {
        digits[n++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    size_t need = (size_t)n + (v < 0);
    if (need >= room) return -1;
    size_t k = 0;
    if (v < 0) out[k++] = '-';
    while (n) out[k++] = digits[--n];
    out[k] = '\0';
    return (int)k;
}

/* The live identity of ``name`` in the partition's dir as STAT's text; -1 when it cannot be stat'ed (missing,
 * unreadable: not settled) */
static int identity_text(int dir, const char *name, char *out, size_t room) {
    struct stat st;
    if (fstatat(dir, name, &st, 0) != 0) return -1;
    char mtime[48];
    __int128 ns = (__int128)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
    if (format_i128(mtime, sizeof mtime, ns) < 0) return -1;
    int n = snprintf(out, room, "{\"inode\":%llu,\"size\":%lld,\"mtime_ns\":%s}", (unsigned long long)st.st_ino,
                     (long long)st.st_size, mtime);
    return n < 0 || (size_t)n >= room ? -1 : n;
}

typedef struct {
    int dir;  // the partition's dir, opened once: each file's name is looked up in it, not its whole path
    long long converted, original;
} Tally;

/* One swap text: parsed, each file stat'ed and compared. SETTLED when every file is its output or its original. */
static int judge_swap(const Text *swap, long long base, Tally *tally) {
    Py_ssize_t at = 0;
    if (!LIT(swap, &at, "[")) return NOT_SETTLED;
    for (int first = 1;; first = 0) {
        if (!first && !LIT(swap, &at, ",")) return NOT_SETTLED;
        if (!LIT(swap, &at, "{\"suffix\":\"")) return NOT_SETTLED;
        Py_ssize_t suffix_at = at;
        while (at < swap->n && suffix_char(swap->s[at])) at++;
        Py_ssize_t suffix_len = at - suffix_at;
        if (!LIT(swap, &at, "\",\"original\":")) return NOT_SETTLED;
        Py_ssize_t original_at = at;
        if (!LIT(swap, &at, "null") && !stat_text(swap, &at)) return NOT_SETTLED;
        Py_ssize_t original_len = at - original_at;
        if (!LIT(swap, &at, ",\"output\":")) return NOT_SETTLED;
        Py_ssize_t output_at = at;
        if (!stat_text(swap, &at)) return NOT_SETTLED;
        Py_ssize_t output_len = at - output_at;
        long long named = base;
        if (LIT(swap, &at, ",\"base_offset\":")) {  // a split source's later output names its own segment
            int fits = 0;
            if (!number(swap, &at, &named, &fits)) return NOT_SETTLED;
            if (!fits) return NOT_SETTLED;  // no file is named by a number past int64
        }
        if (!LIT(swap, &at, "}")) return NOT_SETTLED;

        if (suffix_len > NAME_MAX) return NOT_SETTLED;  // no file has so long a name
        char name[NAME_MAX + 1];
        int n = snprintf(name, sizeof name, "%020lld%.*s", named, (int)suffix_len, swap->s + suffix_at);
        if (n < 0 || (size_t)n >= sizeof name) return NOT_SETTLED;  // too long a name cannot be stat'ed
        char live[160];
        int live_len = identity_text(tally->dir, name, live, sizeof live);
        if (live_len < 0) return NOT_SETTLED;
        if (live_len == output_len && memcmp(live, swap->s + output_at, (size_t)live_len) == 0) {
            tally->converted++;
        } else if (live_len == original_len && memcmp(live, swap->s + original_at, (size_t)live_len) == 0) {
            tally->original++;
        } else {
            return NOT_SETTLED;
        }
        if (LIT(swap, &at, "]")) return at == swap->n ? SETTLED : NOT_SETTLED;
    }
}

static int is_hex(char c) { return is_digit(c) || (c >= 'a' && c <= 'f'); }

static int decimal_length(long long v) {
    char digits[32];
    return snprintf(digits, sizeof digits, "%lld", v);
}

typedef struct {
    long long base;
    Text swap, piece;
} Segment;

/* The scan proper, on C data only: it runs without the GIL (its stat calls are most of its time), so a thread
 * reading the state database's next rows runs beside it. ``edges`` gets each segment's log edges position. */
static int scan(const Text *text, Py_ssize_t pos, const char *prefix, const Segment *segments, Py_ssize_t count,
                Py_ssize_t *edges, Tally *tally) {
    tally->dir = open(prefix, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (tally->dir < 0) return NOT_SETTLED;  // no partition dir to look in: nothing is settled
    int verdict = NOT_SETTLED;
    for (Py_ssize_t i = 0; i < count; i++) {
        const Segment *seg = &segments[i];
        if (i > 0 && !LIT(text, &pos, ",")) goto done;
        Py_ssize_t start = pos;
        if (!literal(text, &pos, seg->piece.s, seg->piece.n)) goto done;
        /* the result's text starts after '{"base_offset":' base ',"files":' swap ',"result":' (34 characters and
         * the two texts) and ends before ',"log_edges":"' (14): both inside the piece just matched */
        Py_ssize_t at_result = start + 34 + decimal_length(seg->base) + seg->swap.n;
        if (at_result >= pos - 15 || text->s[at_result] != '{' || text->s[pos - 15] != '}') goto done;
        if (text->n - pos < 66) goto done;
        for (Py_ssize_t k = pos; k < pos + 64; k++)
            if (!is_hex(text->s[k])) goto done;
        if (text->s[pos + 64] != '"' || text->s[pos + 65] != '}') goto done;
        edges[i] = pos;
        pos += 66;
        if (judge_swap(&seg->swap, seg->base, tally) != SETTLED) goto done;
    }
    if (pos + 2 == text->n && !(tally->original && tally->converted)) verdict = SETTLED;
done:
    close(tally->dir);
    return verdict;
}

static PyObject *settled_scan(PyObject *self, PyObject *args) {
    PyObject *text_obj, *prefix_obj, *known;
    Py_ssize_t pos;
    if (!PyArg_ParseTuple(args, "UnUO!:settled_scan", &text_obj, &pos, &prefix_obj, &PyList_Type, &known))
        return NULL;
    Text text;
    if (!ascii_of(text_obj, &text) || !PyUnicode_IS_COMPACT_ASCII(prefix_obj)) Py_RETURN_NOTIMPLEMENTED;
    const char *prefix = (const char *)PyUnicode_DATA(prefix_obj);
    if (memchr(prefix, '\0', (size_t)PyUnicode_GET_LENGTH(prefix_obj)) != NULL) {
        PyErr_SetString(PyExc_ValueError, "settled_scan: embedded null character in the partition's path");
        return NULL;
    }
    if (pos < 0 || pos > text.n) {
        PyErr_Format(PyExc_ValueError, "settled_scan: position %zd outside the record's %zd characters", pos, text.n);
        return NULL;
    }
    /* our own list of the items: another thread may change ``known`` while the scan runs without the GIL, never
     * this copy, whose tuples (immutable) hold every string the scan reads */
    PyObject *held = PyList_GetSlice(known, 0, PyList_GET_SIZE(known));
    if (held == NULL) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(held);
    Segment *segments = PyMem_Calloc((size_t)count + 1, sizeof(Segment));
    Py_ssize_t *edges = PyMem_Calloc((size_t)count + 1, sizeof(Py_ssize_t));
    PyObject *out = NULL;
    if (segments == NULL || edges == NULL) {
        PyErr_NoMemory();
        goto end;
    }
    int usable = 1;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(held, i);
        if (!PyTuple_Check(item) || PyTuple_GET_SIZE(item) != 3) {
            PyErr_Format(PyExc_TypeError, "settled_scan: known[%zd] is not a (base, swap, piece) tuple", i);
            goto end;
        }
        PyObject *base = PyTuple_GET_ITEM(item, 0);
        PyObject *swap = PyTuple_GET_ITEM(item, 1), *piece = PyTuple_GET_ITEM(item, 2);
        if (!PyUnicode_Check(swap) || (piece != Py_None && !PyUnicode_Check(piece))) {
            PyErr_Format(PyExc_TypeError, "settled_scan: known[%zd]'s swap and piece must be str (piece: or None)", i);
            goto end;
        }
        if (!PyUnicode_IS_COMPACT_ASCII(swap) || (piece != Py_None && !PyUnicode_IS_COMPACT_ASCII(piece))) {
            out = Py_NewRef(Py_NotImplemented);
            goto end;
        }
        if (piece == Py_None || !PyLong_CheckExact(base)) {
            usable = 0;  // not settled; the later items are still checked, as the loop used to
            continue;
        }
        int overflow = 0;
        segments[i].base = PyLong_AsLongLongAndOverflow(base, &overflow);
        if (overflow) usable = 0;  // no segment has a base offset past int64
        ascii_of(swap, &segments[i].swap);
        ascii_of(piece, &segments[i].piece);
    }
    int verdict = NOT_SETTLED;
    Tally tally = {-1, 0, 0};
    if (usable) {
        Py_BEGIN_ALLOW_THREADS
        verdict = scan(&text, pos, prefix, segments, count, edges, &tally);
        Py_END_ALLOW_THREADS
    }
    if (verdict != SETTLED) {
        out = Py_NewRef(Py_None);
        goto end;
    }
    PyObject *found = PyList_New(count);
    if (found == NULL) goto end;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *edge = PyUnicode_FromStringAndSize(text.s + edges[i], 64);
        if (edge == NULL) {
            Py_DECREF(found);
            goto end;
        }
        PyList_SET_ITEM(found, i, edge);
    }
    out = Py_BuildValue("(LLN)", tally.converted, tally.original, found);
end:
    PyMem_Free(segments);
    PyMem_Free(edges);
    Py_DECREF(held);
    return out;
}

static PyMethodDef methods[] = {
    {"settled_scan", settled_scan, METH_VARARGS, "a settled partition's files, judged against its swap record"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_settled", NULL, -1, methods};

PyMODINIT_FUNC PyInit__settled(void) { return PyModule_Create(&module); }
