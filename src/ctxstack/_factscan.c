/*
 * ctxstack._factscan: the token scan of ctxstack.compact.facts, with the shape judging,
 * in one pass.
 *
 * Optional. facts.py's compiled regular expressions stay the reference and the fallback;
 * this finds exactly the same tokens, in the same order, as
 *
 *     _SCAN.findall(text + " #")[:-2]      (scan)
 *     _QUOTE.findall(text)                 (quotes)
 *
 * by walking the str's code points with the regex engine's own order of attempts: a
 * match attempt at ``start`` runs to the next S character and backs off over the
 * positions before it (longest first), trying the alternatives in pattern order; an
 * attempt that fails at every position is retried from ``start + 1``. The grammar (the
 * character sets, the unit words, the CJK suffixes, the month spellings) is compiled in
 * here and exported as GRAMMAR, which facts.py compares with its own before using this
 * module: a stale in-place build is ignored, not trusted.
 *
 * ``judged`` goes on from the tokens: distinct tokens in first-appearance order, the
 * digit shape of each (ASCII 1-9 -> 0), its verdict from facts.py's cache (facts.py's
 * own judge is called for a shape not cached yet) and, for each token judged a fact, the
 * Candidate tuple. Classification itself stays in Python: one place for the rules.
 * ``extract`` is the one call facts.py makes per text: file names, ``judged``, and the
 * candidates of the distinct quoted phrases.
 *
 * Memory-safety check (not in CI): build this file alone with
 * -fsanitize=address,undefined -fno-sanitize-recover=all into a copy of src/, and run
 * tests/test_factscan.py against it with libasan and libubsan preloaded; the CHANGELOG
 * (issue 14, part 3) has the commands.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>
#include <uchar.h>

/* Texts at least this long are scanned with the GIL released (the str is immutable and
 * the caller's reference keeps it alive); the Python objects are made afterwards. */
#define NOGIL_CHARS (1 << 16)

/* Character classes of the scan (all ASCII): S, the characters a token must hold; L,
 * the other token characters; END, the token characters a value may end with. */
#define C_S 1
#define C_L 2
#define C_END 4
#define C_DIGIT 8
#define C_LOWER_DOT 16 /* [a-z.] */
#define C_ALNUM 32     /* [A-Za-z0-9] */
#define NO_CHAR 0xFFFFFFFFu /* before the text or past the sentinel */

static const char S_CHARS[] = "0123456789/@\\$#";
static const char L_CHARS[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_.:%+~,=?&-";
static const char END_CHARS[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_%+~0123456789/@\\$#";
static unsigned char CLASS[256]; /* 128-255: no class (the 1-byte loop reads it unchecked) */

/* The unit words, in the pattern's order (the first that fits wins). */
static const char32_t *const UNITS[] = {
    U"%", U"kg", U"g", U"mg", U"km", U"m", U"cm", U"mm", U"ms", U"s", U"GB", U"MB", U"KB",
    U"TB", U"GiB", U"MiB", U"USD", U"EUR", U"JPY", U"GBP", U"CNY", U"px", U"kWh", U"W",
    U"Hz", U"MHz", U"GHz", U"ドル", U"ユーロ", U"日間", U"時間", U"lb", U"lbs", U"oz",
    U"mi", U"ft", U"L", U"ml", U"°C", U"°F", U"yen", U"dollars", U"euros",
};
#define N_UNITS (sizeof UNITS / sizeof UNITS[0])
static const char32_t CJK_SUFFIX[] = U"年月日時分秒円元件個人名泊回歳万億度号枚台本";
/* Every spelling the month alternative accepts (and the look-behind reads back). */
static const char *const MONTHS[] = {
    "Jan", "January", "Feb", "February", "Mar", "March", "Apr", "April", "May", "Jun",
    "June", "Jul", "July", "Aug", "August", "Sep", "Sept", "September", "Oct", "October",
    "Nov", "November", "Dec", "December",
};
#define N_MONTHS (sizeof MONTHS / sizeof MONTHS[0])
static Py_ssize_t MONTH_LEN[N_MONTHS];

/* The text as the pattern sees it: text + " #" (the sentinel), NO_CHAR outside. */
typedef struct {
    int kind;
    const void *data;
    Py_ssize_t n;
} Text;

/* A str argument, in its canonical (ready) form; 0, or -1 with TypeError set. */
static int
check_str(PyObject *text, const char *who)
{
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "%s() expects a str, not %.100s", who,
                     Py_TYPE(text)->tp_name);
        return -1;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0) /* only a legacy C-API str is not ready */
        return -1;
#endif
    return 0;
}

static inline Py_UCS4
at(const Text *t, Py_ssize_t i)
{
    if (i < 0)
        return NO_CHAR;
    if (i < t->n)
        return PyUnicode_READ(t->kind, t->data, i);
    if (i == t->n)
        return ' ';
    if (i == t->n + 1)
        return '#';
    return NO_CHAR;
}

static inline int
cls(Py_UCS4 c, int bit)
{
    return c < 128 && (CLASS[c] & bit);
}

static inline int
is_cjk_suffix(Py_UCS4 c)
{
    if (c < 0x3000)
        return 0;
    for (const char32_t *p = CJK_SUFFIX; *p; p++)
        if (*p == c)
            return 1;
    return 0;
}

/* Whether the text at i spells the ASCII word w; its length in *len. */
static inline int
spells(const Text *t, Py_ssize_t i, const char *w, Py_ssize_t *len)
{
    Py_ssize_t k = 0;
    for (; w[k]; k++)
        if (at(t, i + k) != (unsigned char)w[k])
            return 0;
    *len = k;
    return 1;
}

/* (?!L*+S) at i: no S character after the run of L characters from i. */
static inline int
no_token_ahead(const Text *t, Py_ssize_t i)
{
    while (cls(at(t, i), C_L))
        i++;
    return !cls(at(t, i), C_S);
}

/* Exactly 1 or 2 ASCII digits at i (then a non-digit); how many, else 0. */
static inline Py_ssize_t
day_digits(const Text *t, Py_ssize_t i)
{
    Py_ssize_t k = 0;
    while (k < 3 && cls(at(t, i + k), C_DIGIT))
        k++;
    return (k == 1 || k == 2) ? k : 0;
}

/* ", dddd" at i, then no digit. */
static inline int
year_at(const Text *t, Py_ssize_t i)
{
    if (at(t, i) != ',' || at(t, i + 1) != ' ')
        return 0;
    for (int k = 2; k < 6; k++)
        if (!cls(at(t, i + k), C_DIGIT))
            return 0;
    return !cls(at(t, i + 6), C_DIGIT);
}

/* _DAY at i: [0-9]{1,2}(?:(?:st|nd|rd|th)(?!L*+S))?(?:, [0-9]{4})?(?![0-9]); its end,
 * else -1. */
static Py_ssize_t
day_at(const Text *t, Py_ssize_t i)
{
    Py_ssize_t k = day_digits(t, i);
    if (!k)
        return -1;
    Py_ssize_t pos = i + k;
    Py_UCS4 a = at(t, pos), b = at(t, pos + 1);
    int suffix = ((a == 's' && b == 't') || (a == 'n' && b == 'd') ||
                  (a == 'r' && b == 'd') || (a == 't' && b == 'h')) &&
                 no_token_ahead(t, pos + 2);
    if (suffix)
        pos += 2; /* the suffix's look-ahead leaves no digit at pos */
    return year_at(t, pos) ? pos + 6 : pos;
}

/* A month spelling at i followed by a space (or, when `allow_dot`, by ". "): the
 * position after that space, else -1. At most one spelling can be followed by either,
 * so the first that fits is the one the regex's backtracking would settle on. */
static Py_ssize_t
month_at(const Text *t, Py_ssize_t i, int allow_dot)
{
    Py_UCS4 c = at(t, i);
    if (!(c == 'J' || c == 'F' || c == 'M' || c == 'A' || c == 'S' || c == 'O' ||
          c == 'N' || c == 'D'))
        return -1;
    for (size_t m = 0; m < N_MONTHS; m++) {
        Py_ssize_t len;
        if (!spells(t, i, MONTHS[m], &len))
            continue;
        Py_ssize_t q = i + len;
        if (allow_dot && at(t, q) == '.' && at(t, q + 1) == ' ')
            return q + 2;
        if (at(t, q) == ' ')
            return q + 1;
    }
    return -1;
}

/* _MONTH_FIRST at i: month, optional dot, space, day. */
static Py_ssize_t
month_first(const Text *t, Py_ssize_t i)
{
    Py_ssize_t q = month_at(t, i, 1);
    return q < 0 ? -1 : day_at(t, q);
}

/* _AFTER_MONTH at i: "Month " or "Month. " before i (the spelling not preceded by an L
 * character), and a day at i. */
static int
after_month(const Text *t, Py_ssize_t i)
{
    if (at(t, i - 1) != ' ' || !cls(at(t, i - 2), C_LOWER_DOT))
        return 0;
    int found = 0;
    for (size_t m = 0; m < N_MONTHS && !found; m++) {
        Py_ssize_t len = MONTH_LEN[m];
        for (int dot = 0; dot < 2 && !found; dot++) {
            Py_ssize_t begin = i - 1 - dot - len, got;
            if (begin < 0 || (dot && at(t, i - 2) != '.'))
                continue;
            if (spells(t, begin, MONTHS[m], &got) && !cls(at(t, begin - 1), C_L))
                found = 1;
        }
    }
    return found && day_at(t, i) >= 0;
}

/* _DAY_FIRST at i: [0-9]{1,2} MONTH [0-9]{4}(?![0-9]). */
static Py_ssize_t
day_first(const Text *t, Py_ssize_t i)
{
    Py_ssize_t k = day_digits(t, i);
    if (!k || at(t, i + k) != ' ')
        return -1;
    Py_ssize_t q = month_at(t, i + k + 1, 0);
    if (q < 0)
        return -1;
    for (int d = 0; d < 4; d++)
        if (!cls(at(t, q + d), C_DIGIT))
            return -1;
    return cls(at(t, q + 4), C_DIGIT) ? -1 : q + 4;
}

/* The unit alternative at i: " " unit (?![A-Za-z0-9]) (?!L*+S); its end, else -1. */
static Py_ssize_t
unit_after(const Text *t, Py_ssize_t i)
{
    if (at(t, i) != ' ')
        return -1;
    for (size_t u = 0; u < N_UNITS; u++) {
        const char32_t *w = UNITS[u];
        Py_ssize_t k = 0;
        while (w[k] && at(t, i + 1 + k) == (Py_UCS4)w[k])
            k++;
        if (w[k])
            continue;
        Py_ssize_t end = i + 1 + k;
        if (!cls(at(t, end), C_ALNUM) && no_token_ahead(t, end))
            return end;
    }
    return -1;
}

/* The general token at i (an L run, an S): L*+ S (?:T* END)? then a unit or CJK
 * suffixes with their numbers; its end. */
static Py_ssize_t
general(const Text *t, Py_ssize_t i)
{
    while (cls(at(t, i), C_L))
        i++;
    Py_ssize_t end = i + 1, r = i + 1; /* at(t, i) is the S */
    for (Py_UCS4 c; cls(c = at(t, r), C_S | C_L); r++)
        if (cls(c, C_END))
            end = r + 1;
    Py_ssize_t unit = unit_after(t, end);
    if (unit >= 0)
        return unit;
    while (is_cjk_suffix(at(t, end))) {
        end++;
        if (cls(at(t, end), C_DIGIT)) {
            while (cls(at(t, end), C_DIGIT))
                end++;
            while ((at(t, end) == '.' || at(t, end) == ',') && cls(at(t, end + 1), C_DIGIT)) {
                end++;
                while (cls(at(t, end), C_DIGIT))
                    end++;
            }
        }
    }
    return end;
}

/* The first S character at or after i in the text proper, else t->n. */
static Py_ssize_t
next_s(const Text *t, Py_ssize_t i)
{
    Py_ssize_t n = t->n;
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *d = t->data;
        while (i < n && !(CLASS[d[i]] & C_S))
            i++;
        break;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *d = t->data;
        while (i < n && !(d[i] < 128 && (CLASS[d[i]] & C_S)))
            i++;
        break;
    }
    default: {
        const Py_UCS4 *d = t->data;
        while (i < n && !(d[i] < 128 && (CLASS[d[i]] & C_S)))
            i++;
    }
    }
    return i;
}

/* One match attempt of _SCAN's first alternative from `start`: the token's bounds in
 * *begin / *end and 1, or 0 (the regex engine then retries from start + 1). */
static int
attempt(const Text *t, Py_ssize_t start, Py_ssize_t s, Py_ssize_t *begin, Py_ssize_t *end)
{
    for (Py_ssize_t p = s; p >= start; p--) {
        if (cls(at(t, p - 1), C_L))
            continue; /* (?<!L) */
        Py_UCS4 c = at(t, p);
        Py_ssize_t e;
        if (p < s) {
            /* An L character starting a run: a month-first date, or the run reaches s. */
            if (!cls(c, C_L))
                continue;
            if ((e = month_first(t, p)) >= 0) {
                *begin = p, *end = e;
                return 1;
            }
            Py_ssize_t q = p;
            while (q < s && cls(at(t, q), C_L))
                q++;
            if (q == s) {
                *begin = p, *end = general(t, p);
                return 1;
            }
            continue;
        }
        /* p == s, an S character: no month starts here. */
        if (cls(c, C_DIGIT)) {
            if (after_month(t, p))
                continue;
            if ((e = day_first(t, p)) >= 0) {
                *begin = p, *end = e;
                return 1;
            }
        }
        *begin = p, *end = general(t, p);
        return 1;
    }
    return 0;
}

typedef struct {
    Py_ssize_t *spans; /* begin, end pairs */
    Py_ssize_t count, room;
} Spans;

static int
spans_push(Spans *sp, Py_ssize_t begin, Py_ssize_t end)
{
    if (sp->count == sp->room) {
        Py_ssize_t room = sp->room ? sp->room * 2 : 64;
        if ((size_t)room > PY_SSIZE_T_MAX / (2 * sizeof(Py_ssize_t)))
            return -1;
        Py_ssize_t *grown = realloc(sp->spans, (size_t)room * 2 * sizeof(Py_ssize_t));
        if (!grown)
            return -1;
        sp->spans = grown, sp->room = room;
    }
    sp->spans[2 * sp->count] = begin;
    sp->spans[2 * sp->count + 1] = end;
    sp->count++;
    return 0;
}

/* Every token's bounds (no Python API: may run without the GIL); -1 when out of memory. */
static int
scan_spans(const Text *t, Spans *sp)
{
    Py_ssize_t start = 0;
    for (;;) {
        Py_ssize_t s = next_s(t, start);
        if (s >= t->n)
            return 0; /* what is left is the sentinel token "#" and the empty end match */
        Py_ssize_t begin, end;
        if (!attempt(t, start, s, &begin, &end)) {
            start++;
            continue;
        }
        if (spans_push(sp, begin, end) < 0)
            return -1;
        start = end;
    }
}

/* The spans of `text` (a str), the GIL released for long texts. */
static int
text_spans(PyObject *text, Spans *sp)
{
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    int rc;
    if (t.n >= NOGIL_CHARS) {
        Py_BEGIN_ALLOW_THREADS
        rc = scan_spans(&t, sp);
        Py_END_ALLOW_THREADS
    } else {
        rc = scan_spans(&t, sp);
    }
    if (rc < 0)
        PyErr_NoMemory();
    return rc;
}

static PyObject *
scan(PyObject *module, PyObject *text)
{
    (void)module;
    if (check_str(text, "scan") < 0)
        return NULL;
    Spans sp = {NULL, 0, 0};
    if (text_spans(text, &sp) < 0) {
        free(sp.spans);
        return NULL;
    }
    PyObject *out = PyList_New(sp.count);
    for (Py_ssize_t k = 0; out && k < sp.count; k++) {
        PyObject *token = PyUnicode_Substring(text, sp.spans[2 * k], sp.spans[2 * k + 1]);
        if (!token)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, k, token);
    }
    free(sp.spans);
    return out;
}

/* _QUOTE = "[^"\n :,;{}\[\]][^"\n ]{0,79}+ [^"\n]{1,80}+" : the end of a quoted phrase
 * starting at the quote mark at i, else -1 (possessive runs: no backing off). */
static Py_ssize_t
quote_at(const Text *t, Py_ssize_t i)
{
    Py_UCS4 c = at(t, i + 1);
    if (i + 1 >= t->n || c == '"' || c == '\n' || c == ' ' || c == ':' || c == ',' ||
        c == ';' || c == '{' || c == '}' || c == '[' || c == ']')
        return -1;
    Py_ssize_t j = i + 2, k = 0;
    for (; k < 79 && j < t->n && (c = at(t, j)) != '"' && c != '\n' && c != ' '; k++)
        j++;
    if (j >= t->n || at(t, j) != ' ')
        return -1;
    j++;
    for (k = 0; k < 80 && j < t->n && (c = at(t, j)) != '"' && c != '\n'; k++)
        j++;
    if (k == 0 || j >= t->n || at(t, j) != '"')
        return -1;
    return j + 1;
}

/* The first `c` (ASCII) at or after i in the text proper, else t->n. */
static Py_ssize_t
find_ascii(const Text *t, Py_ssize_t i, Py_UCS4 c)
{
    Py_ssize_t n = t->n;
    if (i >= n)
        return n;
    switch (t->kind) {
    case PyUnicode_1BYTE_KIND: {
        const Py_UCS1 *d = t->data;
        const void *hit = memchr(d + i, (int)c, (size_t)(n - i));
        return hit ? (const Py_UCS1 *)hit - d : n;
    }
    case PyUnicode_2BYTE_KIND: {
        const Py_UCS2 *d = t->data;
        while (i < n && d[i] != c)
            i++;
        return i;
    }
    default: {
        const Py_UCS4 *d = t->data;
        while (i < n && d[i] != c)
            i++;
        return i;
    }
    }
}

/* Append text[begin:end] to the list `out`. */
static int
append_slice(PyObject *out, PyObject *text, Py_ssize_t begin, Py_ssize_t end)
{
    PyObject *slice = PyUnicode_Substring(text, begin, end);
    if (!slice)
        return -1;
    int rc = PyList_Append(out, slice);
    Py_DECREF(slice);
    return rc;
}

static PyObject *
quotes(PyObject *module, PyObject *text)
{
    (void)module;
    if (check_str(text, "quotes") < 0)
        return NULL;
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t i = find_ascii(&t, 0, '"'); i < t.n;) {
        Py_ssize_t end = quote_at(&t, i);
        if (end >= 0 && append_slice(out, text, i, end) < 0) {
            Py_DECREF(out);
            return NULL;
        }
        i = find_ascii(&t, end >= 0 ? end : i + 1, '"');
    }
    return out;
}

/* The file extensions of _EXTENSION. */
static const char *const EXTENSIONS[] = {
    "py", "js", "ts", "tsx", "jsx", "json", "csv", "tsv", "txt", "md", "yaml", "yml", "toml",
    "ini", "cfg", "conf", "pdf", "png", "jpg", "jpeg", "gif", "svg", "xls", "xlsx", "doc",
    "docx", "ppt", "pptx", "htm", "html", "css", "sql", "log", "sh", "go", "rs", "java",
    "kt", "rb", "php", "c", "cc", "cpp", "h", "hpp", "zip", "gz", "tar", "parquet", "ipynb",
};
#define N_EXTENSIONS (sizeof EXTENSIONS / sizeof EXTENSIONS[0])
static Py_ssize_t EXTENSION_LEN[N_EXTENSIONS];
#define MAX_NAME 128

static inline int
is_word(Py_UCS4 c)
{
    return c < 128 && ((CLASS[c] & C_ALNUM) || c == '_');
}

static inline int
is_name_char(Py_UCS4 c)
{
    return c < 128 && ((CLASS[c] & C_ALNUM) || c == '_' || c == '.' || c == '-');
}

/* _EXTENSION at the dot at i: the end of the extension, else -1. An extension is
 * followed by no word character, so the word after the dot must be one exactly. */
static Py_ssize_t
extension_at(const Text *t, Py_ssize_t i)
{
    Py_UCS4 first = at(t, i + 1);
    if (first < 'a' || first > 'z')
        return -1; /* (?=[a-z]): the dot of a decimal or a sentence end */
    Py_ssize_t k = 0;
    while (k < 8 && is_word(at(t, i + 1 + k)) && i + 1 + k < t->n)
        k++;
    if (k == 0 || k == 8)
        return -1;
    for (size_t e = 0; e < N_EXTENSIONS; e++) {
        const char *x = EXTENSIONS[e];
        if (EXTENSION_LEN[e] != k)
            continue;
        Py_ssize_t j = 0;
        while (j < k && at(t, i + 1 + j) == (unsigned char)x[j])
            j++;
        if (j == k)
            return i + 1 + k;
    }
    return -1;
}

static PyObject *
names(PyObject *module, PyObject *text)
{
    (void)module;
    if (check_str(text, "names") < 0)
        return NULL;
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    for (Py_ssize_t i = find_ascii(&t, 0, '.'); i < t.n;) {
        Py_ssize_t end = extension_at(&t, i);
        if (end < 0) {
            i = find_ascii(&t, i + 1, '.');
            continue;
        }
        /* The name read back from the dot over at most MAX_NAME name characters. */
        Py_ssize_t floor = i > MAX_NAME ? i - MAX_NAME : 0, begin = i;
        while (begin > floor && is_name_char(at(&t, begin - 1)))
            begin--;
        Py_UCS4 before = at(&t, begin - 1);
        if (begin < i && !(begin > 0 && (before == '/' || before == '\\'))) {
            while (at(&t, begin) == '.')
                begin++; /* .lstrip(".") */
            if (append_slice(out, text, begin, end) < 0) {
                Py_DECREF(out);
                return NULL;
            }
        }
        i = find_ascii(&t, end, '.');
    }
    return out;
}

/* The digit shape of a token: ASCII 1-9 -> 0 (a new reference; the token itself when it
 * has none of them). */
static PyObject *
shape_of(PyObject *token)
{
    Py_ssize_t n = PyUnicode_GET_LENGTH(token);
    int kind = PyUnicode_KIND(token);
    const void *data = PyUnicode_DATA(token);
    Py_ssize_t first = 0;
    while (first < n) {
        Py_UCS4 c = PyUnicode_READ(kind, data, first);
        if (c >= '1' && c <= '9')
            break;
        first++;
    }
    if (first == n)
        return Py_NewRef(token);
    PyObject *shape = PyUnicode_New(n, PyUnicode_MAX_CHAR_VALUE(token));
    if (!shape)
        return NULL;
    /* Same maximum character, so the same storage width as the token. */
    if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *in = data;
        Py_UCS1 *out = PyUnicode_1BYTE_DATA(shape);
        for (Py_ssize_t i = 0; i < n; i++)
            out[i] = (in[i] >= '1' && in[i] <= '9') ? '0' : in[i];
    } else {
        int shape_kind = PyUnicode_KIND(shape);
        void *out = PyUnicode_DATA(shape);
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_UCS4 c = PyUnicode_READ(kind, data, i);
            PyUnicode_WRITE(shape_kind, out, i, (c >= '1' && c <= '9') ? '0' : c);
        }
    }
    return shape;
}

/* Add `token` to the distinct ones (`seen`, `order`) unless it is there already. */
static int
add_distinct(PyObject *seen, PyObject *order, PyObject *token)
{
    Py_ssize_t before = PyDict_GET_SIZE(seen);
    if (!PyDict_SetDefault(seen, token, Py_None))
        return -1;
    if (PyDict_GET_SIZE(seen) != before && PyList_Append(order, token) < 0)
        return -1;
    return 0;
}

PyDoc_STRVAR(judged_doc,
"judged(verdicts, judge, candidate, prefixed, limit, text, extra, /)\n"
"--\n\n"
"The candidates of ``text``: its tokens (as ``scan``) then ``extra`` (a list of str),\n"
"distinct, in first-appearance order; each judged by its digit shape through the\n"
"``verdicts`` cache (a dict, shape -> verdict; ``judge(shape)`` fills a missing one, the\n"
"cache cleared first when it holds more than ``limit``). Returns ``(candidates, prefixed,\n"
"seen)``: a ``candidate`` (a tuple subclass) ``(token, kind, score)`` per token whose\n"
"verdict is a ``(kind, score)`` tuple, the tokens whose verdict is ``prefixed``, and the\n"
"dict of every distinct token.");

static PyObject *
judged(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "judged() takes exactly 7 arguments");
        return NULL;
    }
    PyObject *verdicts = args[0], *judge = args[1], *prefixed = args[3], *text = args[5],
             *extra = args[6];
    PyTypeObject *candidate = (PyTypeObject *)args[2];
    if (!PyDict_CheckExact(verdicts) || !PyCallable_Check(judge) || !PyType_Check(args[2]) ||
        !PyType_IsSubtype(candidate, &PyTuple_Type) || !PyUnicode_Check(text) ||
        !PyList_Check(extra) || check_str(text, "judged") < 0) {
        PyErr_SetString(PyExc_TypeError,
                        "judged(dict, callable, tuple subclass, object, int, str, list)");
        return NULL;
    }
    Py_ssize_t limit = PyLong_AsSsize_t(args[4]);
    if (limit == -1 && PyErr_Occurred())
        return NULL;

    Spans sp = {NULL, 0, 0};
    PyObject *seen = NULL, *order = NULL, *out = NULL, *rejected = NULL, *result = NULL;
    if (text_spans(text, &sp) < 0)
        goto done;
    if (!(seen = PyDict_New()) || !(order = PyList_New(0)) || !(out = PyList_New(0)) ||
        !(rejected = PyList_New(0)))
        goto done;
    for (Py_ssize_t k = 0; k < sp.count; k++) {
        PyObject *token = PyUnicode_Substring(text, sp.spans[2 * k], sp.spans[2 * k + 1]);
        int rc = token ? add_distinct(seen, order, token) : -1;
        Py_XDECREF(token);
        if (rc < 0)
            goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(extra); k++) {
        PyObject *token = PyList_GET_ITEM(extra, k);
        if (!PyUnicode_Check(token) || check_str(token, "judged") < 0) {
            PyErr_SetString(PyExc_TypeError, "judged(): extra holds a non-str");
            goto done;
        }
        Py_INCREF(token); /* the list may change under a callback: hold it */
        int rc = add_distinct(seen, order, token);
        Py_DECREF(token);
        if (rc < 0)
            goto done;
    }
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(order); k++) {
        PyObject *token = PyList_GET_ITEM(order, k); /* `order` is ours: stays alive */
        PyObject *shape = shape_of(token);
        if (!shape)
            goto done;
        PyObject *verdict = PyDict_GetItemWithError(verdicts, shape);
        if (verdict) {
            Py_INCREF(verdict);
        } else if (PyErr_Occurred()) {
            Py_DECREF(shape);
            goto done;
        } else {
            if (PyDict_GET_SIZE(verdicts) > limit)
                PyDict_Clear(verdicts);
            verdict = PyObject_CallOneArg(judge, shape);
            if (!verdict || PyDict_SetItem(verdicts, shape, verdict) < 0) {
                Py_XDECREF(verdict);
                Py_DECREF(shape);
                goto done;
            }
        }
        Py_DECREF(shape);
        int rc = 0;
        if (verdict == prefixed) {
            rc = PyList_Append(rejected, token);
        } else if (PyTuple_CheckExact(verdict) && PyTuple_GET_SIZE(verdict) == 2) {
            PyObject *row = candidate->tp_alloc(candidate, 3);
            if (!row) {
                rc = -1;
            } else {
                PyTuple_SET_ITEM(row, 0, Py_NewRef(token));
                PyTuple_SET_ITEM(row, 1, Py_NewRef(PyTuple_GET_ITEM(verdict, 0)));
                PyTuple_SET_ITEM(row, 2, Py_NewRef(PyTuple_GET_ITEM(verdict, 1)));
                rc = PyList_Append(out, row);
                Py_DECREF(row);
            }
        } else if (verdict != Py_None) {
            PyErr_Format(PyExc_TypeError,
                         "judged(): a verdict is None, `prefixed` or a (kind, score) tuple, "
                         "not %.100R", verdict);
            rc = -1;
        }
        Py_DECREF(verdict);
        if (rc < 0)
            goto done;
    }
    result = PyTuple_Pack(3, out, rejected, seen);
done:
    free(sp.spans);
    Py_XDECREF(seen);
    Py_XDECREF(order);
    Py_XDECREF(out);
    Py_XDECREF(rejected);
    return result;
}

/* Candidates (phrase, kind, score) of the distinct phrases in `found`, in order. */
static PyObject *
distinct_rows(PyObject *found, PyTypeObject *candidate, PyObject *verdict)
{
    PyObject *seen = PyDict_New(), *order = PyList_New(0), *rows = PyList_New(0);
    if (!seen || !order || !rows)
        goto fail;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(found); k++)
        if (add_distinct(seen, order, PyList_GET_ITEM(found, k)) < 0)
            goto fail;
    for (Py_ssize_t k = 0; k < PyList_GET_SIZE(order); k++) {
        PyObject *row = candidate->tp_alloc(candidate, 3);
        if (!row)
            goto fail;
        PyTuple_SET_ITEM(row, 0, Py_NewRef(PyList_GET_ITEM(order, k)));
        PyTuple_SET_ITEM(row, 1, Py_NewRef(PyTuple_GET_ITEM(verdict, 0)));
        PyTuple_SET_ITEM(row, 2, Py_NewRef(PyTuple_GET_ITEM(verdict, 1)));
        int rc = PyList_Append(rows, row);
        Py_DECREF(row);
        if (rc < 0)
            goto fail;
    }
    Py_DECREF(seen);
    Py_DECREF(order);
    return rows;
fail:
    Py_XDECREF(seen);
    Py_XDECREF(order);
    Py_XDECREF(rows);
    return NULL;
}

PyDoc_STRVAR(extract_doc,
"extract(verdicts, judge, candidate, prefixed, limit, quote, text, quotes, /)\n"
"--\n\n"
"One call for a whole text: ``judged(verdicts, judge, candidate, prefixed, limit, text,\n"
"names(text))`` (names only when the text holds a dot) and, when ``quotes`` is true and\n"
"the text holds a quote mark, a ``candidate`` ``(phrase, *quote)`` per distinct quoted\n"
"phrase. Returns ``(candidates, prefixed, seen, quoted)``.");

static PyObject *
extract(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "extract() takes exactly 8 arguments");
        return NULL;
    }
    PyObject *quote = args[5], *text = args[6];
    if (!PyTuple_CheckExact(quote) || PyTuple_GET_SIZE(quote) != 2 ||
        check_str(text, "extract") < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "extract(): quote is a (kind, score) tuple");
        return NULL;
    }
    int want_quotes = PyObject_IsTrue(args[7]);
    if (want_quotes < 0)
        return NULL;
    Text t = {PyUnicode_KIND(text), PyUnicode_DATA(text), PyUnicode_GET_LENGTH(text)};
    PyObject *extra = find_ascii(&t, 0, '.') < t.n ? names(module, text) : PyList_New(0);
    if (!extra)
        return NULL;
    PyObject *const judged_args[7] = {args[0], args[1], args[2], args[3], args[4], text, extra};
    PyObject *tokens = judged(module, judged_args, 7), *quoted = NULL, *result = NULL;
    Py_DECREF(extra);
    if (!tokens)
        return NULL;
    if (want_quotes && find_ascii(&t, 0, '"') < t.n) {
        PyObject *found = quotes(module, text);
        if (found) {
            quoted = distinct_rows(found, (PyTypeObject *)args[2], quote);
            Py_DECREF(found);
        }
    } else {
        quoted = PyList_New(0);
    }
    if (quoted)
        result = PyTuple_Pack(4, PyTuple_GET_ITEM(tokens, 0), PyTuple_GET_ITEM(tokens, 1),
                              PyTuple_GET_ITEM(tokens, 2), quoted);
    Py_DECREF(tokens);
    Py_XDECREF(quoted);
    return result;
}

PyDoc_STRVAR(scan_doc,
"scan(text, /)\n--\n\n"
"The tokens of ``text``, in order: ``_SCAN.findall(text + \" #\")[:-2]`` of\n"
"ctxstack.compact.facts.");
PyDoc_STRVAR(names_doc,
"names(text, /)\n--\n\n"
"The ``name.ext`` file names of ``text``, in order: ``_file_names(text)`` of\n"
"ctxstack.compact.facts.");
PyDoc_STRVAR(quotes_doc,
"quotes(text, /)\n--\n\n"
"The quoted phrases of ``text``, in order: ``_QUOTE.findall(text)`` of\n"
"ctxstack.compact.facts.");

static PyMethodDef methods[] = {
    {"scan", (PyCFunction)scan, METH_O, scan_doc},
    {"quotes", (PyCFunction)quotes, METH_O, quotes_doc},
    {"names", (PyCFunction)names, METH_O, names_doc},
    {"judged", (PyCFunction)(void (*)(void))judged, METH_FASTCALL, judged_doc},
    {"extract", (PyCFunction)(void (*)(void))extract, METH_FASTCALL, extract_doc},
    {NULL, NULL, 0, NULL},
};

static PyObject *
ucs4_str(const char32_t *s)
{
    Py_ssize_t n = 0;
    while (s[n])
        n++;
    Py_UCS4 buffer[16];
    if (n > 16)
        return PyErr_Format(PyExc_SystemError, "grammar word too long");
    for (Py_ssize_t i = 0; i < n; i++)
        buffer[i] = (Py_UCS4)s[i];
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n);
}

/* GRAMMAR = (S characters, L characters, END characters, unit words, CJK suffixes,
 * month spellings, file extensions, MAX_NAME): what facts.py checks against its own. */
static PyObject *
grammar(void)
{
    PyObject *units = PyTuple_New(N_UNITS), *months = PyTuple_New(N_MONTHS), *cjk = NULL;
    PyObject *extensions = PyTuple_New(N_EXTENSIONS);
    if (!units || !months || !extensions)
        goto fail;
    for (size_t e = 0; e < N_EXTENSIONS; e++) {
        PyObject *word = PyUnicode_FromString(EXTENSIONS[e]);
        if (!word)
            goto fail;
        PyTuple_SET_ITEM(extensions, e, word);
    }
    for (size_t u = 0; u < N_UNITS; u++) {
        PyObject *word = ucs4_str(UNITS[u]);
        if (!word)
            goto fail;
        PyTuple_SET_ITEM(units, u, word);
    }
    for (size_t m = 0; m < N_MONTHS; m++) {
        PyObject *word = PyUnicode_FromString(MONTHS[m]);
        if (!word)
            goto fail;
        PyTuple_SET_ITEM(months, m, word);
    }
    Py_ssize_t n = 0;
    while (CJK_SUFFIX[n])
        n++;
    Py_UCS4 buffer[64];
    for (Py_ssize_t i = 0; i < n && i < 64; i++)
        buffer[i] = (Py_UCS4)CJK_SUFFIX[i];
    if (!(cjk = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, buffer, n < 64 ? n : 64)))
        goto fail;
    return Py_BuildValue("(sssNNNNn)", S_CHARS, L_CHARS, END_CHARS, units, cjk, months,
                         extensions, (Py_ssize_t)MAX_NAME);
fail:
    Py_XDECREF(extensions);
    Py_XDECREF(units);
    Py_XDECREF(months);
    Py_XDECREF(cjk);
    return NULL;
}

static int
exec_module(PyObject *module)
{
    memset(CLASS, 0, sizeof CLASS);
    for (const char *p = S_CHARS; *p; p++)
        CLASS[(unsigned char)*p] |= C_S;
    for (const char *p = L_CHARS; *p; p++)
        CLASS[(unsigned char)*p] |= C_L;
    for (const char *p = END_CHARS; *p; p++)
        CLASS[(unsigned char)*p] |= C_END;
    for (int c = '0'; c <= '9'; c++)
        CLASS[c] |= C_DIGIT | C_ALNUM;
    for (int c = 'a'; c <= 'z'; c++)
        CLASS[c] |= C_LOWER_DOT | C_ALNUM;
    for (int c = 'A'; c <= 'Z'; c++)
        CLASS[c] |= C_ALNUM;
    CLASS['.'] |= C_LOWER_DOT;
    for (size_t m = 0; m < N_MONTHS; m++)
        MONTH_LEN[m] = (Py_ssize_t)strlen(MONTHS[m]);
    for (size_t e = 0; e < N_EXTENSIONS; e++)
        EXTENSION_LEN[e] = (Py_ssize_t)strlen(EXTENSIONS[e]);
    PyObject *g = grammar();
    if (!g || PyModule_AddObject(module, "GRAMMAR", g) < 0) {
        Py_XDECREF(g);
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot slots[] = {
    {Py_mod_exec, exec_module},
    {0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "ctxstack._factscan",
    "The fact extractor's token scan and shape judging in C (see ctxstack.compact.facts).",
    0,
    methods,
    slots,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC
PyInit__factscan(void)
{
    return PyModuleDef_Init(&module_def);
}
