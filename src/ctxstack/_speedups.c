/*
 * ctxstack._speedups: the default token estimator of ctxstack.token_model in one pass.
 *
 * Optional. token_model's pure-Python path (C-level bytes passes driven from Python)
 * stays the reference and the fallback; this computes exactly the same integer, reading
 * the str's code points directly instead of encoding it to UTF-8. Everything fitted (the
 * class of each UTF-8 lead byte, the pair weights, the traditional-character set and its
 * weight) is passed in by token_model; only the model's fixed shape lives here, in the
 * constants below, which token_model compares with its own (LAYOUT) before using this.
 *
 * The model, per text of n code points c[0..n-1]:
 *   class(c)  = classes[UTF-8 lead byte of c] (a lone surrogate's lead byte is 0xED, as
 *               Python's "surrogatepass" encodes it);
 *   units     = sum over i of weights[class(c[i]) << 4 | class(c[i+1])] - OFFSET, with
 *               class(c[n]) = 0;
 *   script    = the per-script correction, in 1/SCRIPT_SCALE tokens, when the text has a
 *               character of a SCRIPT_CLASS_* class (else 0): over the code points whose
 *               lead byte has a group g = groups[lead] (< SCRIPT_GROUPS), script_weights[g]
 *               per character, script_weights[SCRIPT_GROUPS + g] per run (a group
 *               character after one of no group, or first), and script_weights[2 *
 *               SCRIPT_GROUPS + b] per character of block b = blocks[lead << 6 | second
 *               UTF-8 byte & 63] (< SCRIPT_BLOCKS); a b from SCRIPT_BLOCKS on is symbol
 *               block y = b - SCRIPT_BLOCKS (whatever the group): script_weights[2 *
 *               SCRIPT_GROUPS + SCRIPT_BLOCKS + y] per character and that +
 *               SYMBOL_BLOCKS per run (a character of y after one of no symbol block,
 *               or first),
 *               that + 2 * SYMBOL_BLOCKS per repeat (a character of y equal to the one
 *               before it); a symbol block character set in the frequent bitmap is of
 *               the last symbol block instead;
 *   tokens    = units / SCALE, or (units * (SCRIPT_SCALE / SCALE) + script) / SCRIPT_SCALE
 *               when script != 0 (one exact integer, one division: Python's int / int),
 *               plus, if the text has a Han character, traditional_weight *
 *               STRIDE * (how many of every STRIDE-th code point from the first Han
 *               character to the last are in the traditional set);
 *   result    = max(int(tokens + 0.5), ceil(digits / DIGITS_PER_TOKEN)
 *                                      + ceil((n - digits) / CHARS_PER_TOKEN)).
 * Sums are 64-bit: a weight is below 256, so they cannot wrap below 2^55 characters.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define SCALE 64
#define OFFSET 64
#define STRIDE 4
#define CHARS_PER_TOKEN 8
#define DIGITS_PER_TOKEN 3
#define DIGIT_CLASS 2
#define HAN_CLASS 12
#define SCRIPT_SCALE 4096
#define SCRIPT_GROUPS 10
#define SCRIPT_BLOCKS 20
#define SYMBOL_BLOCKS 8  /* the last one, "frequent", is given by a bitmap, not by blocks */
#define FREQUENT_BLOCK (SCRIPT_BLOCKS + SYMBOL_BLOCKS - 1)
#define FREQUENT_BITS 0x11000  /* U+2000-U+2FFF, then U+1F000-U+1FFFF */
#define SCRIPT_WEIGHTS (2 * SCRIPT_GROUPS + SCRIPT_BLOCKS + 3 * SYMBOL_BLOCKS)
/* The classes that hold the groups' and symbol blocks' lead bytes (two-byte, symbol,
 * other three-byte, four-byte). */
#define SCRIPT_CLASS_A 9
#define SCRIPT_CLASS_B 10
#define SCRIPT_CLASS_C 14
#define SCRIPT_CLASS_D 15
#define SCRIPT_CLASS_MASK (1u << SCRIPT_CLASS_A | 1u << SCRIPT_CLASS_B \
                           | 1u << SCRIPT_CLASS_C | 1u << SCRIPT_CLASS_D)
/* The classes of the groups' lead bytes: with none of them seen, only a symbol block
 * character (U+2100-U+2BFF here) can make the correction non-zero. */
#define GROUP_CLASS_MASK (1u << SCRIPT_CLASS_A | 1u << SCRIPT_CLASS_C | 1u << SCRIPT_CLASS_D)
/* Texts this long are counted with the GIL released (the str is immutable and the
 * caller's references keep it and the tables alive). */
#define NOGIL_CHARS (1 << 20)

/* The UTF-8 lead byte of code point cp (cp <= 0x10FFFF). */
static inline unsigned int
lead_byte(Py_UCS4 cp)
{
    if (cp < 0x80)
        return cp;
    if (cp < 0x800)
        return 0xC0 | (cp >> 6);
    if (cp < 0x10000)
        return 0xE0 | (cp >> 12);
    return 0xF0 | (cp >> 18);
}

typedef struct {
    int64_t units;    /* sum of (weight + OFFSET) over the pairs */
    Py_ssize_t digits;
    Py_ssize_t first_han, last_han;  /* -1 when the text has none */
    unsigned int seen;  /* bit c set when some character has class c (1-byte str: ~0) */
} Sums;

/* The pass over the code points, one loop per storage width of the str (a 1-byte str,
 * Latin-1, cannot hold a Han character: its loop skips that check, and the classes seen,
 * reported as all: a non-ASCII Latin-1 str always has Latin-1 letters or signs, of the
 * latin1 script group; tracking them costs ASCII text ~20%). Classes are masked to
 * 4 bits, so a pair always indexes within the 256 weights whatever table is passed. */
#define SUM_PASS(TYPE, MAY_HAVE_HAN)                                            \
    do {                                                                        \
        const TYPE *s = (const TYPE *)data;                                     \
        unsigned int prev = classes[lead_byte(s[0])] & 15;                      \
        unsigned int seen = 1u << prev;                                         \
        if (prev == HAN_CLASS)                                                  \
            sums->first_han = sums->last_han = 0;                               \
        sums->digits += prev == DIGIT_CLASS;                                    \
        for (Py_ssize_t i = 1; i < n; i++) {                                    \
            unsigned int cls = classes[lead_byte(s[i])] & 15;                   \
            sums->units += weights[prev << 4 | cls];                            \
            sums->digits += cls == DIGIT_CLASS;                                 \
            if (MAY_HAVE_HAN)                                                   \
                seen |= 1u << cls;                                              \
            if (MAY_HAVE_HAN && cls == HAN_CLASS) {                             \
                if (sums->first_han < 0)                                        \
                    sums->first_han = i;                                        \
                sums->last_han = i;                                             \
            }                                                                   \
            prev = cls;                                                         \
        }                                                                       \
        sums->units += weights[prev << 4];  /* the last one; next class 0 */    \
        sums->seen = MAY_HAVE_HAN ? seen : ~0u;                                 \
    } while (0)

static void
sum_pass(int kind, const void *data, Py_ssize_t n, const unsigned char *classes,
         const unsigned char *weights, Sums *sums)
{
    sums->units = 0;
    sums->digits = 0;
    sums->first_han = sums->last_han = -1;
    if (kind == PyUnicode_1BYTE_KIND)
        SUM_PASS(Py_UCS1, 0);
    else if (kind == PyUnicode_2BYTE_KIND)
        SUM_PASS(Py_UCS2, 1);
    else
        SUM_PASS(Py_UCS4, 1);
}

/* The per-script correction's pass (see the top comment), one loop per storage width. The
 * second UTF-8 byte's low six bits: cp's bits 0-5 (two-byte), 6-11 (three-byte), 12-17
 * (four-byte). */
#define NO_BLOCK 255u
#define SYMBOL_WEIGHTS (2 * SCRIPT_GROUPS + SCRIPT_BLOCKS)  /* where they start */
#define SCRIPT_PASS(TYPE)                                                       \
    do {                                                                        \
        const TYPE *s = (const TYPE *)data;                                     \
        int in_run = 0;                                                         \
        unsigned int prev_block = NO_BLOCK;                                     \
        Py_UCS4 prev_cp = 0;                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                    \
            Py_UCS4 cp = s[i];                                                  \
            unsigned int lead, group, second, block;                            \
            if (cp < 0x80) {                                                    \
                in_run = 0;                                                     \
                prev_block = NO_BLOCK;                                          \
                prev_cp = cp;                                                   \
                continue;                                                       \
            }                                                                   \
            lead = lead_byte(cp);                                               \
            second = (cp < 0x800 ? cp : cp < 0x10000 ? cp >> 6 : cp >> 12) & 63;  \
            block = blocks[lead << 6 | second];                                 \
            if (block >= SCRIPT_BLOCKS && block < FREQUENT_BLOCK                \
                    && is_frequent(frequent, cp))                               \
                block = FREQUENT_BLOCK;                                         \
            group = groups[lead];                                               \
            if (group < SCRIPT_GROUPS) {                                        \
                units += script_weights[group];                                 \
                if (!in_run)                                                    \
                    units += script_weights[SCRIPT_GROUPS + group];             \
                in_run = 1;                                                     \
                if (block < SCRIPT_BLOCKS)                                      \
                    units += script_weights[2 * SCRIPT_GROUPS + block];         \
            }                                                                   \
            else                                                                \
                in_run = 0;                                                     \
            if (block >= SCRIPT_BLOCKS && block < SCRIPT_BLOCKS + SYMBOL_BLOCKS) {  \
                units += script_weights[SYMBOL_WEIGHTS + block - SCRIPT_BLOCKS];  \
                if (prev_block < SCRIPT_BLOCKS                                  \
                        || prev_block >= SCRIPT_BLOCKS + SYMBOL_BLOCKS)         \
                    units += script_weights[SYMBOL_WEIGHTS + SYMBOL_BLOCKS      \
                                            + block - SCRIPT_BLOCKS];           \
                else if (cp == prev_cp)                                         \
                    units += script_weights[SYMBOL_WEIGHTS + 2 * SYMBOL_BLOCKS  \
                                            + block - SCRIPT_BLOCKS];           \
            }                                                                   \
            prev_block = block;                                                 \
            prev_cp = cp;                                                       \
        }                                                                       \
    } while (0)

/* Whether code point cp is set in the frequent symbols' bitmap. */
static inline int
is_frequent(const unsigned char *frequent, Py_UCS4 cp)
{
    Py_UCS4 i;
    if (cp >= 0x2000 && cp < 0x3000)
        i = cp - 0x2000;
    else if (cp >= 0x1F000 && cp < 0x20000)
        i = cp - 0x1F000 + 0x1000;
    else
        return 0;
    return (frequent[i >> 3] >> (i & 7)) & 1;
}

/* Whether some code point is in a symbol block: U+2100-U+2BFF or U+10000 and above (all
 * of SYMBOL_BLOCKS, as token_scripts' tests check). A tight loop, much cheaper than the
 * script pass: text whose only non-ASCII characters are punctuation (Chinese with its
 * quotation marks, English with dashes) skips the pass. */
#define HAS_SYMBOL_BLOCK(TYPE)                                                  \
    do {                                                                        \
        const TYPE *s = (const TYPE *)data;                                     \
        unsigned int found = 0;                                                 \
        for (Py_ssize_t i = 0; i < n; i++) {                                    \
            Py_UCS4 cp = s[i];                                                  \
            found |= (cp - 0x2100u < 0xB00u) | (cp >= 0x10000u);                \
        }                                                                       \
        return (int)found;                                                      \
    } while (0)

static int
has_symbol_block(int kind, const void *data, Py_ssize_t n)
{
    if (kind == PyUnicode_2BYTE_KIND)
        HAS_SYMBOL_BLOCK(Py_UCS2);
    else if (kind == PyUnicode_4BYTE_KIND)
        HAS_SYMBOL_BLOCK(Py_UCS4);
    return 0;  /* a 1-byte str has no symbol (and never gets here: Latin-1 is a group) */
}

/* Whether the script pass can add anything: a group's class was seen, or a symbol block
 * character is there. */
static int
needs_script_pass(int kind, const void *data, Py_ssize_t n, unsigned int seen)
{
    if (!(seen & SCRIPT_CLASS_MASK))
        return 0;
    if (seen & GROUP_CLASS_MASK)
        return 1;
    return has_symbol_block(kind, data, n);
}

static int64_t
script_pass(int kind, const void *data, Py_ssize_t n, const unsigned char *groups,
            const unsigned char *blocks, const unsigned char *weight_bytes,
            const unsigned char *frequent)
{
    int script_weights[SCRIPT_WEIGHTS];  /* a copy: bytes data need not be int-aligned */
    memcpy(script_weights, weight_bytes, sizeof script_weights);
    int64_t units = 0;
    if (kind == PyUnicode_1BYTE_KIND)
        SCRIPT_PASS(Py_UCS1);
    else if (kind == PyUnicode_2BYTE_KIND)
        SCRIPT_PASS(Py_UCS2);
    else
        SCRIPT_PASS(Py_UCS4);
    return units;
}

/* How many of every STRIDE-th code point in [first, last] are set in the bitmap of the
 * Basic Multilingual Plane (bit cp & 7 of byte cp >> 3). */
static Py_ssize_t
traditional_hits(int kind, const void *data, Py_ssize_t first, Py_ssize_t last,
                 const unsigned char *bitmap)
{
    Py_ssize_t hits = 0;
    for (Py_ssize_t i = first; i <= last; i += STRIDE) {
        Py_UCS4 cp = PyUnicode_READ(kind, data, i);
        if (cp < 0x10000 && (bitmap[cp >> 3] >> (cp & 7)) & 1)
            hits++;
    }
    return hits;
}

static const unsigned char *
table_arg(PyObject *arg, Py_ssize_t size, const char *name)
{
    if (!PyBytes_Check(arg) || PyBytes_GET_SIZE(arg) != size) {
        PyErr_Format(PyExc_TypeError, "%s: expected bytes of length %zd", name, size);
        return NULL;
    }
    return (const unsigned char *)PyBytes_AS_STRING(arg);
}

PyDoc_STRVAR(estimate_doc,
"estimate(classes, weights, traditional, traditional_weight, groups, blocks,\n"
"         script_weights, frequent, text, /) -> int\n\n"
"The token estimate of ctxstack.token_model for text. classes: 256 bytes, the class of\n"
"each UTF-8 lead byte; weights: 256 bytes, pair weight + OFFSET by (class << 4 | next\n"
"class); traditional: 8192 bytes, a bitmap of the BMP code points of the traditional\n"
"feature; traditional_weight: its weight (float); groups: 256 bytes, the script group\n"
"of each lead byte (>= SCRIPT_GROUPS: none); blocks: 16384 bytes, the block of each\n"
"(lead byte << 6 | second byte & 63) (< SCRIPT_BLOCKS: a script block, then\n"
"SYMBOL_BLOCKS symbol blocks, else none); script_weights: the correction's weights in\n"
"1/SCRIPT_SCALE tokens, native C ints (array('i')): per group character, per group\n"
"run, per block character, per symbol block character, run and repeat; frequent:\n"
"8704 bytes, the bitmap of the frequent symbols (U+2000-U+2FFF, then U+1F000-U+1FFFF).\n"
"Text last, for functools.partial.");

static PyObject *
estimate(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "estimate() takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    const unsigned char *classes = table_arg(args[0], 256, "classes");
    const unsigned char *weights = classes ? table_arg(args[1], 256, "weights") : NULL;
    const unsigned char *bitmap = weights ? table_arg(args[2], 8192, "traditional") : NULL;
    if (bitmap == NULL)
        return NULL;
    double traditional_weight = PyFloat_AsDouble(args[3]);
    if (traditional_weight == -1.0 && PyErr_Occurred())
        return NULL;
    const unsigned char *groups = table_arg(args[4], 256, "groups");
    const unsigned char *blocks = groups ? table_arg(args[5], 256 * 64, "blocks") : NULL;
    const unsigned char *script_weights = blocks ? table_arg(
        args[6], SCRIPT_WEIGHTS * (Py_ssize_t)sizeof(int), "script_weights") : NULL;
    const unsigned char *frequent = script_weights ? table_arg(
        args[7], FREQUENT_BITS / 8, "frequent") : NULL;
    if (frequent == NULL)
        return NULL;
    PyObject *text = args[8];
    if (!PyUnicode_Check(text)) {
        PyErr_Format(PyExc_TypeError, "text: expected str, got %.100s",
                     Py_TYPE(text)->tp_name);
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (PyUnicode_READY(text) < 0)
        return NULL;
#endif
    Py_ssize_t n = PyUnicode_GET_LENGTH(text);
    if (n == 0)
        return PyLong_FromLong(0);
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);

    Sums sums;
    Py_ssize_t hits = 0;
    int64_t script = 0;
    /* an ASCII str (the common case) cannot have a script group's character */
    int may_have_script = !PyUnicode_IS_ASCII(text);
    if (n >= NOGIL_CHARS) {
        Py_BEGIN_ALLOW_THREADS
        sum_pass(kind, data, n, classes, weights, &sums);
        if (sums.first_han >= 0)
            hits = traditional_hits(kind, data, sums.first_han, sums.last_han, bitmap);
        if (may_have_script && needs_script_pass(kind, data, n, sums.seen))
            script = script_pass(kind, data, n, groups, blocks, script_weights,
                                 frequent);
        Py_END_ALLOW_THREADS
    }
    else {
        sum_pass(kind, data, n, classes, weights, &sums);
        if (sums.first_han >= 0)
            hits = traditional_hits(kind, data, sums.first_han, sums.last_han, bitmap);
        if (may_have_script && needs_script_pass(kind, data, n, sums.seen))
            script = script_pass(kind, data, n, groups, blocks, script_weights,
                                 frequent);
    }

    /* Python's float steps, one rounding each: units / SCALE is exact (|units| < 2^53),
     * the product is rounded on its own before the sum (volatile: no fused multiply-add,
     * which Python never does), int() truncates toward zero as the C cast does. */
    int64_t units = sums.units - (int64_t)OFFSET * n;
    double tokens = script ? (double)(units * (SCRIPT_SCALE / SCALE) + script) / SCRIPT_SCALE
                           : (double)units / SCALE;
    if (sums.first_han >= 0) {
        volatile double extra = traditional_weight * (double)(STRIDE * (int64_t)hits);
        tokens += extra;
    }
    int64_t rounded = (int64_t)(tokens + 0.5);
    int64_t digits = sums.digits;
    int64_t floor = (digits + DIGITS_PER_TOKEN - 1) / DIGITS_PER_TOKEN
                    + (n - digits + CHARS_PER_TOKEN - 1) / CHARS_PER_TOKEN;
    return PyLong_FromLongLong(rounded > floor ? rounded : floor);
}

static PyMethodDef methods[] = {
    {"estimate", (PyCFunction)(void (*)(void))estimate, METH_FASTCALL, estimate_doc},
    {NULL, NULL, 0, NULL},
};

static int
exec_module(PyObject *module)
{
    PyObject *layout = Py_BuildValue("(iiiiiiiiiii(iiii))", SCALE, OFFSET, STRIDE,
                                     CHARS_PER_TOKEN, DIGITS_PER_TOKEN, DIGIT_CLASS,
                                     HAN_CLASS, SCRIPT_SCALE, SCRIPT_GROUPS, SCRIPT_BLOCKS,
                                     SYMBOL_BLOCKS, SCRIPT_CLASS_A, SCRIPT_CLASS_B,
                                     SCRIPT_CLASS_C, SCRIPT_CLASS_D);
    if (layout == NULL)
        return -1;
    if (PyModule_AddObject(module, "LAYOUT", layout) < 0) {
        Py_DECREF(layout);
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
    .m_name = "ctxstack._speedups",
    .m_doc = "One-pass C version of ctxstack.token_model's estimate (optional; same "
             "results as the pure-Python path).\n\nLAYOUT: (SCALE, OFFSET, STRIDE, "
             "CHARS_PER_TOKEN, DIGITS_PER_TOKEN, DIGIT_CLASS, HAN_CLASS, SCRIPT_SCALE, "
             "SCRIPT_GROUPS, SCRIPT_BLOCKS, SYMBOL_BLOCKS, (SCRIPT_CLASS_A, _B, _C, _D)), the "
             "fixed shape of "
             "the model this was compiled for.",
    .m_size = 0,
    .m_methods = methods,
    .m_slots = slots,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    return PyModuleDef_Init(&module_def);
}
