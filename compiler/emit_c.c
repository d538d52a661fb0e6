/* emit_c.c: renders kernel descriptions and op lists as plain C, one file per stage, and
 * the program description with the schedule table.
 *
 * A kernel becomes a static function looping over its iteration space; a section (the
 * embedding, one block, the head) becomes a static function calling kernels and pr_gemm
 * in op-list order (ops.c; the walk over the list is emit_common.c's); the stage's entry
 * points compose the sections. Offsets are the layout's (layout.c), written as constants.
 */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"
#include "../runtime/pacirt.h"

/* The shortest of %.15g and %.17g that reads back as exactly x. Static buffers, rotated, so
 * a few may appear in one call. */
static const char *exact_double(double x)
{
    static char buffers[8][32];
    static int next;
    char *buf = buffers[next++ % 8];
    snprintf(buf, sizeof buffers[0], "%.15g", x);
    if (strtod(buf, NULL) != x)
        snprintf(buf, sizeof buffers[0], "%.17g", x);
    return buf;
}

static void blank_line(StrBuf *sb)
{
    sb_puts(sb, "\n");
}

/* A designated initialiser `.field = "value",` on its own line. */
static void emit_string_field(StrBuf *sb, const char *field, const char *value)
{
    StrBuf literal = {0};
    emit_c_string(&literal, value);
    emit_line(sb, ".%s = %s,", field, literal.data);
    sb_free(&literal);
}

/* Data files are baked in as absolute paths, so `run` finds them from any folder. */
static void emit_data_path(StrBuf *sb, const char *field, const char *path)
{
    char *absolute = path ? realpath(path, NULL) : NULL;
    emit_string_field(sb, field, absolute ? absolute : path);
    free(absolute);
}

static void emit_layout(StrBuf *sb, const Layout *l)
{
    for (int i = 0; i < l->n; i++)
        emit_line(sb, "#define %-18s %10ldL /* %ld floats: %s */", l->entry[i].name,
                  l->entry[i].offset, l->entry[i].size, l->entry[i].doc);
}

/* A kernel's indices are independent where its body has no ATOMIC_ADD: the GPU runs them all
 * at once. Such a kernel's C splits its iteration space into KERNEL_PARTS ranges that the
 * stage's cores share (pr_parallel_for), each index whole on one thread: the same bits. Below
 * the extent where that pays (a row kernel's rows, an element kernel's elements) it runs alone. */
enum { KERNEL_PARTS = 16, PARALLEL_MIN_ROWS = 64, PARALLEL_MIN_ELEMENTS = 65536 };

/* What the kernels' bodies need in C (kernels.c's vocabulary). */
static void emit_c_kernel_macros(StrBuf *sb)
{
    emit_line(sb, "/* Kernels run their indices in order here: accumulation is a plain add. */");
    emit_line(sb, "#define RESTRICT restrict");
    emit_line(sb, "#define ATOMIC_ADD(ptr, value) (*(ptr) += (value))");
    emit_line(sb, "#define UNROLL /* the C compiler chooses */");
    emit_line(sb, "/* Dot products vectorise when pacic builds (it passes -fopenmp-simd -DPR_OMP_SIMD); any");
    emit_line(sb, " * other build keeps the sums in order. */");
    emit_line(sb, "#ifdef PR_OMP_SIMD");
    emit_line(sb, "#define PR_PRAGMA(x) _Pragma(#x)");
    emit_line(sb, "#define SIMD_SUM(...) PR_PRAGMA(omp simd reduction(+ : __VA_ARGS__))");
    emit_line(sb, "#define SIMD_MAX(x) PR_PRAGMA(omp simd reduction(max : x))");
    emit_line(sb, "/* glibc's libmvec has expf on vectors, but math.h declares it only under -ffast-math:");
    emit_line(sb, " * declared here, the rows that call expf (GELU, softmax) vectorise too. */");
    emit_line(sb, "#if defined(__x86_64__) && defined(__GLIBC__)");
    emit_line(sb, "#pragma omp declare simd notinbranch");
    emit_line(sb, "float expf(float);");
    emit_line(sb, "#endif");
    emit_line(sb, "#else");
    emit_line(sb, "#define SIMD_SUM(...)");
    emit_line(sb, "#define SIMD_MAX(x)");
    emit_line(sb, "#endif");
    emit_line(sb, "/* Row kernels: one index walks its whole row (the GPU splits it over a warp). */");
    emit_line(sb, "#define ROW_LOOP(i, from, to) for (int i = (from); i < (to); i++)");
    emit_line(sb, "#define ROW_SUM(x) (x)");
    emit_line(sb, "#define ROW_MAX(x) (x)");
    emit_line(sb, "#define LEAD 1");
    emit_line(sb, "/* A kernel of independent indices splits them into KERNEL_PARTS ranges on the stage's cores,");
    emit_line(sb, " * from PARALLEL_MIN_ROWS rows (or PARALLEL_MIN_ELEMENTS elements) on. */");
    emit_line(sb, "enum { KERNEL_PARTS = %d, PARALLEL_MIN_ROWS = %d, PARALLEL_MIN_ELEMENTS = %d };", KERNEL_PARTS,
              PARALLEL_MIN_ROWS, PARALLEL_MIN_ELEMENTS);
}

static bool kernel_runs_in_parallel(const KernelDesc *k)
{
    // bias_backward's loop over columns vectorises only inlined where the width is a constant:
    // as ranges it took 10x the CPU time (bench/gpt6.paci's profile)
    return !strstr(k->body, "ATOMIC_ADD") && strcmp(k->name, "bias_backward") != 0;
}

/* The names of a parameter list "float *RESTRICT out, int rows" ("out, rows"), prefixed. */
static char *param_names(const char *params, const char *prefix)
{
    char items[32][128];
    int n = split_list(params, items, 32);
    StrBuf sb = {0};
    for (int i = 0; i < n; i++) {
        const char *end = items[i] + strlen(items[i]), *start = end;
        while (start > items[i] && (isalnum((unsigned char)start[-1]) || start[-1] == '_'))
            start--;
        sb_printf(&sb, "%s%s%.*s", i ? ", " : "", prefix, (int)(end - start), start);
    }
    return sb.data;
}

/* A kernel in C: the body inside a loop over the iteration space, indices in order; a kernel
 * of independent indices as ranges of them on the stage's cores. */
static void emit_c_kernel(StrBuf *sb, const KernelDesc *k)
{
    if (k->blocks)
        ICE("kernel %s is the GPU's only", k->name);
    bool parallel = kernel_runs_in_parallel(k);
    emit_line(sb, "/* %s */", k->doc);
    if (!parallel) {
        emit_line(sb, "static void %s(%s)", k->name, k->params);
        emit_open_block(sb);
        emit_open(sb, "for (long %s = 0; %s < %s; %s++)", k->index, k->index, k->extent, k->index);
        emit_kernel_body(sb, k);
        emit_close(sb, "");
        emit_close(sb, "");
        blank_line(sb);
        return;
    }
    char items[32][128];
    int n = split_list(k->params, items, 32);
    char *names = param_names(k->params, ""), *fields = param_names(k->params, "x->");
    emit_line(sb, "static void %s_range(%s, long from, long to)", k->name, k->params);
    emit_open_block(sb);
    emit_line(sb, "(void)(%s); /* the extent, which from and to stand for */", k->extent);
    emit_open(sb, "for (long %s = from; %s < to; %s++)", k->index, k->index, k->index);
    emit_kernel_body(sb, k);
    emit_close(sb, "");
    emit_close(sb, "");
    blank_line(sb);
    emit_line(sb, "typedef struct %s_args {", k->name);
    for (int i = 0; i < n; i++)
        emit_line(sb, "    %s;", items[i]);
    emit_line(sb, "    long extent;");
    emit_line(sb, "} %s_args;", k->name);
    blank_line(sb);
    emit_line(sb, "static void %s_part(void *ctx, int part, int worker)", k->name);
    emit_open_block(sb);
    emit_line(sb, "const %s_args *x = ctx;", k->name);
    emit_line(sb, "(void)worker;");
    emit_line(sb, "%s_range(%s, x->extent * part / KERNEL_PARTS, x->extent * (part + 1) / KERNEL_PARTS);", k->name,
              fields);
    emit_close(sb, "");
    blank_line(sb);
    emit_line(sb, "static void %s(%s)", k->name, k->params);
    emit_open_block(sb);
    emit_line(sb, "long extent = %s;", k->extent);
    emit_line(sb, "if (extent < %s || pr_parallel_cores() == 1)", k->lanes >= 32 ? "PARALLEL_MIN_ROWS" : "PARALLEL_MIN_ELEMENTS");
    emit_line(sb, "    %s_range(%s, 0, extent);", k->name, names);
    emit_line(sb, "else");
    emit_line(sb, "    pr_parallel_for(KERNEL_PARTS, %s_part, &(%s_args){%s, extent});", k->name, k->name, names);
    emit_close(sb, "");
    blank_line(sb);
    free(names);
    free(fields);
}

/* The C functions of the causal products (Op.causal), emitted as they are. */
static const char causal_gemm_source[] =
    "/* The matrix products of the matmul attention, one (sequence, head) at a time, with pr_gemm's\n"
    " * arguments less those that are constant (the shapes T and HS, beta 0). Their T x T operand (the\n"
    " * probabilities or the scores' gradient) is zero above the diagonal, and of a T x T result\n"
    " * (the scores or the probabilities' gradient) nobody reads the entries above it, so the\n"
    " * work above the diagonal is skipped: about half of a full product's. Each entry sums its\n"
    " * terms in ascending order, in one thread, whatever the threads. A block of CG_ROWS rows by\n"
    " * CG_COLS columns keeps its sums in vector registers (the sizes bench/causal_gemm.sh found\n"
    " * fastest for each vector width); CAUSAL_MULADD is a fused multiply-add where the target has\n"
    " * one (as in the BLAS products), so the bits follow the -march, as OpenBLAS's do. */\n"
    "#if defined(__FMA__) || defined(__aarch64__)\n"
    "#define CAUSAL_MULADD(a, b, c) fmaf(a, b, c)\n"
    "#else\n"
    "#define CAUSAL_MULADD(a, b, c) ((a) * (b) + (c))\n"
    "#endif\n"
    "#if defined(__AVX512F__)\n"
    "enum { CG_ROWS = 8, CG_COLS = 32 };\n"
    "#elif defined(__AVX__)\n"
    "enum { CG_ROWS = 4, CG_COLS = 16 };\n"
    "#else\n"
    "enum { CG_ROWS = 4, CG_COLS = 8 };\n"
    "#endif\n"
    "enum { CG_TAIL = HS % CG_COLS };\n"
    "\n"
    "/* rows i0 .. i0 + rows - 1 (rows <= CG_ROWS) of c = alpha a b, columns d0 .. d0 + W - 1: the\n"
    " * sums over j < jend of a[i][j] b[j][d]; a row past `rows` repeats the last (not stored) */\n"
    "static inline void causal_block_nn(int W, float alpha, const float *RESTRICT a, int lda, const float *RESTRICT b,\n"
    "                                   int ldb, float *RESTRICT c, int ldc, int i0, int rows, int jend, int d0)\n"
    "{\n"
    "    float acc[CG_ROWS][CG_COLS] = {{0}};\n"
    "    const float *ar[CG_ROWS];\n"
    "    for (int r = 0; r < CG_ROWS; r++)\n"
    "        ar[r] = a + (long)(i0 + (r < rows ? r : rows - 1)) * lda;\n"
    "    for (int j = 0; j < jend; j++) {\n"
    "        const float *bj = b + (long)j * ldb + d0;\n"
    "#pragma GCC unroll 8 /* each row's sums in registers of their own */\n"
    "        for (int r = 0; r < CG_ROWS; r++) {\n"
    "            float av = ar[r][j];\n"
    "            for (int d = 0; d < W; d++)\n"
    "                acc[r][d] = CAUSAL_MULADD(av, bj[d], acc[r][d]);\n"
    "        }\n"
    "    }\n"
    "    for (int r = 0; r < rows; r++)\n"
    "        for (int d = 0; d < W; d++)\n"
    "            c[(long)(i0 + r) * ldc + d0 + d] = alpha * acc[r][d];\n"
    "}\n"
    "\n"
    "/* c = alpha a b, T x HS, with a (T x T) zero above the diagonal */\n"
    "static void causal_gemm_nn(float alpha, const float *RESTRICT a, int lda, const float *RESTRICT b, int ldb, float *RESTRICT c, int ldc)\n"
    "{\n"
    "    for (int i0 = 0; i0 < T; i0 += CG_ROWS) {\n"
    "        int rows = T - i0 < CG_ROWS ? T - i0 : CG_ROWS;\n"
    "        for (int d0 = 0; d0 + CG_COLS <= HS; d0 += CG_COLS)\n"
    "            causal_block_nn(CG_COLS, alpha, a, lda, b, ldb, c, ldc, i0, rows, i0 + rows, d0);\n"
    "        if (CG_TAIL)\n"
    "            causal_block_nn(CG_TAIL, alpha, a, lda, b, ldb, c, ldc, i0, rows, i0 + rows, HS - CG_TAIL);\n"
    "    }\n"
    "}\n"
    "\n"
    "/* rows j0 .. j0 + rows - 1 of c = alpha a^T b, columns d0 .. d0 + W - 1: the sums over\n"
    " * i >= j0 of a[i][j] b[i][d] */\n"
    "static inline void causal_block_tn(int W, float alpha, const float *RESTRICT a, int lda, const float *RESTRICT b,\n"
    "                                   int ldb, float *RESTRICT c, int ldc, int j0, int rows, int d0)\n"
    "{\n"
    "    float acc[CG_ROWS][CG_COLS] = {{0}};\n"
    "    int col[CG_ROWS];\n"
    "    for (int r = 0; r < CG_ROWS; r++)\n"
    "        col[r] = j0 + (r < rows ? r : rows - 1);\n"
    "    for (int i = j0; i < T; i++) {\n"
    "        const float *ai = a + (long)i * lda, *bi = b + (long)i * ldb + d0;\n"
    "#pragma GCC unroll 8 /* each row's sums in registers of their own */\n"
    "        for (int r = 0; r < CG_ROWS; r++) {\n"
    "            float av = ai[col[r]];\n"
    "            for (int d = 0; d < W; d++)\n"
    "                acc[r][d] = CAUSAL_MULADD(av, bi[d], acc[r][d]);\n"
    "        }\n"
    "    }\n"
    "    for (int r = 0; r < rows; r++)\n"
    "        for (int d = 0; d < W; d++)\n"
    "            c[(long)(j0 + r) * ldc + d0 + d] = alpha * acc[r][d];\n"
    "}\n"
    "\n"
    "/* c = alpha a^T b, T x HS, with a (T x T) zero above the diagonal */\n"
    "static void causal_gemm_tn(float alpha, const float *RESTRICT a, int lda, const float *RESTRICT b, int ldb, float *RESTRICT c, int ldc)\n"
    "{\n"
    "    for (int j0 = 0; j0 < T; j0 += CG_ROWS) {\n"
    "        int rows = T - j0 < CG_ROWS ? T - j0 : CG_ROWS;\n"
    "        for (int d0 = 0; d0 + CG_COLS <= HS; d0 += CG_COLS)\n"
    "            causal_block_tn(CG_COLS, alpha, a, lda, b, ldb, c, ldc, j0, rows, d0);\n"
    "        if (CG_TAIL)\n"
    "            causal_block_tn(CG_TAIL, alpha, a, lda, b, ldb, c, ldc, j0, rows, HS - CG_TAIL);\n"
    "    }\n"
    "}\n"
    "\n"
    "/* rows i0 .. i0 + rows - 1, columns j0 .. j0 + CG_COLS - 1 of c = alpha a b^T, with bt = b^T */\n"
    "static inline void causal_block_nt(float alpha, const float *RESTRICT a, int lda, const float *RESTRICT bt, int ldbt,\n"
    "                                   float *RESTRICT c, int ldc, int i0, int rows, int j0)\n"
    "{\n"
    "    float acc[CG_ROWS][CG_COLS] = {{0}};\n"
    "    const float *ar[CG_ROWS];\n"
    "    for (int r = 0; r < CG_ROWS; r++)\n"
    "        ar[r] = a + (long)(i0 + (r < rows ? r : rows - 1)) * lda;\n"
    "    for (int d = 0; d < HS; d++) {\n"
    "        const float *br = bt + (long)d * ldbt + j0;\n"
    "#pragma GCC unroll 8\n"
    "        for (int r = 0; r < CG_ROWS; r++) {\n"
    "            float av = ar[r][d];\n"
    "            for (int j = 0; j < CG_COLS; j++)\n"
    "                acc[r][j] = CAUSAL_MULADD(av, br[j], acc[r][j]);\n"
    "        }\n"
    "    }\n"
    "    int width = T - j0 < CG_COLS ? T - j0 : CG_COLS; /* the block past T is cut here */\n"
    "    for (int r = 0; r < rows; r++)\n"
    "        for (int j = 0; j < width; j++)\n"
    "            c[(long)(i0 + r) * ldc + j0 + j] = alpha * acc[r][j];\n"
    "}\n"
    "\n"
    "/* c = alpha a b^T, T x T, up to the diagonal (and the rest of its CG_COLS-column block): the\n"
    " * scores or the probabilities' gradient, whose entries above the diagonal nobody reads */\n"
    "static void causal_gemm_nt(float alpha, const float *RESTRICT a, int lda, const float *RESTRICT b, int ldb, float *RESTRICT c, int ldc)\n"
    "{\n"
    "    enum { TB = (T + CG_COLS - 1) / CG_COLS * CG_COLS };\n"
    "    float bt[HS][TB]; /* b transposed; columns from T on are zero */\n"
    "    for (int j = 0; j < T; j++)\n"
    "        for (int d = 0; d < HS; d++)\n"
    "            bt[d][j] = b[(long)j * ldb + d];\n"
    "    for (int d = 0; d < HS; d++)\n"
    "        for (int j = T; j < TB; j++)\n"
    "            bt[d][j] = 0.0f;\n"
    "    for (int i0 = 0; i0 < T; i0 += CG_ROWS) {\n"
    "        int rows = T - i0 < CG_ROWS ? T - i0 : CG_ROWS;\n"
    "        for (int j0 = 0; j0 < i0 + rows; j0 += CG_COLS)\n"
    "            causal_block_nt(alpha, a, lda, &bt[0][0], TB, c, ldc, i0, rows, j0);\n"
    "    }\n"
    "}\n";

/* A causal product (Op.causal) as a call of causal_gemm_nn (a b), _tn (a^T b) or _nt (a b^T):
 * pr_gemm's arguments less the shapes and beta, which the functions have as constants. */
static void emit_causal_gemm(StrBuf *sb, const Op *op)
{
    char args[16][128];
    if (split_list(op->args, args, 16) != 13 || strcmp(args[10], "0.0f") != 0)
        ICE("a causal product with arguments '%s'", op->args);
    bool ta = strcmp(args[0], "1") == 0, tb = strcmp(args[1], "1") == 0;
    const char *form = !ta && !tb ? "nn" : ta && !tb ? "tn" : !ta && tb ? "nt" : NULL;
    const char *shape = tb ? "T, T, HS" : "T, HS, T"; // m, n, k
    char mnk[400];
    snprintf(mnk, sizeof mnk, "%s, %s, %s", args[2], args[3], args[4]);
    if (!form || strcmp(mnk, shape) != 0)
        ICE("a causal product with arguments '%s'", op->args);
    emit_line(sb, "causal_gemm_%s(%s, %s, %s, %s, %s, %s, %s);", form, args[5], args[6], args[7], args[8], args[9],
              args[11], args[12]);
}

/* Generated C written out as it is, line by line at the current indentation. */
static void emit_c_text(StrBuf *sb, const char *text)
{
    for (const char *line = text; *line;) {
        const char *end = strchr(line, '\n');
        int len = end ? (int)(end - line) : (int)strlen(line);
        emit_line(sb, "%.*s", len, line);
        line += len + (end ? 1 : 0);
    }
}

/* A product's arguments for the CPU: under bf16 an operand kept in bf16 (its bf16 form is the
 * operand itself: layout_add_operand) is widened to fp32 first, by pr_widen_bf16 into the
 * calling thread's buffer `slot` (0 for a, 1 for b). */
static char *cpu_gemm_args(const Op *op, bool bf16)
{
    char args[16][128], copies[2][128];
    if (!bf16 || !op->operands_h)
        return xstrdup(op->args);
    if (split_list(op->args, args, 16) != 13 || split_list(op->operands_h, copies, 2) != 2)
        ICE("a product with bf16 operands '%s' and arguments '%s'", op->operands_h, op->args);
    // a: m x k (k x m transposed), leading dimension lda; b: k x n (n x k), ldb
    bool ta = strcmp(args[0], "1") == 0, tb = strcmp(args[1], "1") == 0;
    const char *rows[2] = {ta ? args[4] : args[2], tb ? args[3] : args[4]};
    const char *cols[2] = {ta ? args[2] : args[4], tb ? args[4] : args[3]};
    char widened[2][256];
    for (int i = 0; i < 2; i++) {
        int at = i == 0 ? 6 : 8;
        if (strcmp(args[at], copies[i]) == 0)
            snprintf(widened[i], sizeof widened[i], "pr_widen_bf16(%d, %s, %s, %s, %s)", i, args[at], rows[i],
                     cols[i], args[at + 1]);
        else
            snprintf(widened[i], sizeof widened[i], "%s", args[at]);
    }
    StrBuf sb = {0};
    for (int i = 0; i < 13; i++)
        sb_printf(&sb, "%s%s", i ? ", " : "", i == 6 ? widened[0] : i == 8 ? widened[1] : args[i]);
    return sb.data;
}

/* The T x T workspaces of the matmul attention, which a parallel (b, h) loop gives each thread
 * its own of: the stage thread (worker 0) keeps the layout's, a helper takes pr_thread_floats. */
static const char *const head_workspaces[] = {"a + A_ATT_WORK", "s + S_ATT_P", "s + S_ATT_DP"};
enum { N_HEAD_WORKSPACES = 3 };

/* s with every whole occurrence of `from` replaced by `to`. */
static char *replace_all(const char *s, const char *from, const char *to)
{
    StrBuf sb = {0};
    size_t len = strlen(from);
    for (const char *p = s; *p;) {
        const char *hit = strstr(p, from);
        if (!hit) {
            sb_puts(&sb, p);
            break;
        }
        bool whole = !isalnum((unsigned char)hit[len]) && hit[len] != '_';
        sb_printf(&sb, "%.*s%s", (int)(hit - p), p, whole ? to : from);
        p = hit + len;
    }
    return sb.data ? sb.data : xstrdup("");
}

/* Whether an op of ops[from, to) names `text` (a base "a + " or a workspace). */
static bool ops_name(const OpList *l, int from, int to, const char *text)
{
    for (int i = from; i < to; i++)
        if (strstr(l->ops[i].args, text))
            return true;
    return false;
}

/* The end of the parallel loop pair that opens at ops[i]: the index after its two OP_ENDs. */
static int parallel_loop_end(const OpList *l, int i)
{
    int depth = 0;
    for (int k = i; k < l->n; k++) {
        depth += l->ops[k].kind == OP_LOOP ? 1 : l->ops[k].kind == OP_END ? -1 : 0;
        if (depth == 0)
            return k + 1;
    }
    ICE("a parallel loop without its end");
}

/* Op i of a section; a timed op (number `index` in the section) is wrapped in OP_BEGIN/OP_END. */
static int emit_c_op(StrBuf *sb, const OpList *l, int i, const char *section, int index, const void *bf16)
{
    const Op *op = &l->ops[i];
    if (op->kind == OP_LOOP && op->parallel) {
        int end = parallel_loop_end(l, i);
        emit_line(sb, "/* %s, %s: on the stage's cores */", op->comment, l->ops[i + 1].comment);
        emit_line(sb, "pr_parallel_for((%s) * (%s), %s_loop%d, &(parallel_bases){%s, %s});", strchr(op->args, ',') + 2,
                  strchr(l->ops[i + 1].args, ',') + 2, section, i,
                  ops_name(l, i + 2, end - 2, "a + ") ? "(float *)a" : "NULL",
                  ops_name(l, i + 2, end - 2, "s + ") ? "(float *)s" : "NULL");
        return end - i;
    }
    if (op->kind != OP_END)
        emit_line(sb, "/* %s */", op->comment);
    if (emit_loop_op(sb, op))
        return 1;
    emit_op_begin(sb, section, index);
    switch (op->kind) {
    case OP_KERNEL:
        emit_line(sb, "%s(%s);", op->kernel->name, op->args);
        break;
    case OP_GEMM: {
        char *args = cpu_gemm_args(op, *(const bool *)bf16);
        if (op->bias)
            emit_line(sb, "pr_gemm_bias(%s, %s);", args, op->bias);
        else if (op->causal)
            emit_causal_gemm(sb, op);
        else
            emit_line(sb, "pr_gemm(%s);", args);
        free(args);
        break;
    }
    case OP_ZERO: {
        /* "dst, count" */
        const char *comma = strchr(op->args, ',');
        emit_line(sb, "memset(%.*s, 0, (size_t)(%s) * sizeof(float));", (int)(comma - op->args),
                  op->args, comma + 2);
        break;
    }
    case OP_COPY: {
        /* "dst, src, count" */
        const char *last = strrchr(op->args, ',');
        emit_line(sb, "memcpy(%.*s, (size_t)(%s) * sizeof(float));", (int)(last - op->args),
                  op->args, last + 2);
        break;
    }
    case OP_LOOP:
    case OP_END:
        unreachable();
    }
    emit_op_end(sb, section, index);
    return 1;
}

/* The body of the parallel loop pair at ops[i] as `static void NAME_loopI(void *ctx, int index,
 * int worker)`, its ops numbered from `index` as in the section; the bases come in ctx. */
static void emit_c_parallel_body(StrBuf *sb, const OpList *l, int i, const char *section, int index, bool bf16)
{
    int end = parallel_loop_end(l, i);
    const Op *outer = &l->ops[i], *inner = &l->ops[i + 1];
    if (inner->kind != OP_LOOP || l->ops[end - 2].kind != OP_END)
        ICE("a parallel loop that is not a pair");
    char outer_var[64], inner_var[64];
    snprintf(outer_var, sizeof outer_var, "%.*s", (int)strcspn(outer->args, ","), outer->args);
    snprintf(inner_var, sizeof inner_var, "%.*s", (int)strcspn(inner->args, ","), inner->args);
    const char *inner_extent = strchr(inner->args, ',') + 2;
    emit_line(sb, "/* %s, %s: one iteration of the loop pair on the stage's cores */", outer->comment, inner->comment);
    emit_line(sb, "static void %s_loop%d(void *ctx, int index, int worker)", section, i);
    emit_open_block(sb);
    for (int b = 0; b < 2; b++) {
        const char *base = b == 0 ? "a" : "s";
        char named[8];
        snprintf(named, sizeof named, "%s + ", base);
        if (ops_name(l, i + 2, end - 2, named))
            emit_line(sb, "float *%s = ((parallel_bases *)ctx)->%s;", base, base);
    }
    emit_line(sb, "int %s = index / (%s), %s = index %% (%s);", outer_var, inner_extent, inner_var, inner_extent);
    OpList body = {0};
    body.n = body.cap = end - 2 - (i + 2);
    body.ops = xmalloc((size_t)(body.n > 0 ? body.n : 1) * sizeof *body.ops);
    for (int k = 0; k < body.n; k++) {
        body.ops[k] = l->ops[i + 2 + k];
        body.ops[k].args = xstrdup(body.ops[k].args); // the body's own, rewritten below
    }
    int slots = 0;
    for (int w = 0; w < N_HEAD_WORKSPACES; w++)
        slots += ops_name(l, i + 2, end - 2, head_workspaces[w]);
    if (slots > 0)
        emit_line(sb, "float *scratch = worker ? pr_thread_floats(%d * (size_t)T * T) : NULL;", slots);
    else // attention stored: the forward writes each head's probabilities where they are kept
        emit_line(sb, "(void)worker;");
    for (int w = 0, slot = 0; w < N_HEAD_WORKSPACES; w++) {
        if (!ops_name(l, i + 2, end - 2, head_workspaces[w]))
            continue;
        emit_line(sb, "float *work%d = worker ? scratch + %d * (size_t)T * T : %s;", w, slot, head_workspaces[w]);
        char name[16];
        snprintf(name, sizeof name, "work%d", w);
        for (int k = 0; k < body.n; k++) {
            char *renamed = replace_all(body.ops[k].args, head_workspaces[w], name);
            free(body.ops[k].args);
            body.ops[k].args = renamed;
        }
        slot++;
    }
    for (int k = 0, timed = index; k < body.n;) {
        int used = emit_c_op(sb, &body, k, section, timed, &bf16);
        for (int u = 0; u < used; u++)
            timed += op_is_timed(&body.ops[k + u]);
        k += used;
    }
    for (int k = 0; k < body.n; k++)
        free(body.ops[k].args); // the body's copies
    free(body.ops);
    emit_close(sb, "");
    blank_line(sb);
}

/* A section as `static void name(params)`; its ops are numbered from OPS_name. */
static void emit_c_section(StrBuf *sb, const StageSection *section, bool bf16)
{
    const OpList *l = section->ops;
    for (int i = 0, timed = 0; i < l->n; i++) {
        if (l->ops[i].kind == OP_LOOP && l->ops[i].parallel)
            emit_c_parallel_body(sb, l, i, section->name, timed, bf16);
        timed += op_is_timed(&l->ops[i]);
    }
    emit_line(sb, "/* %s */", section->doc);
    emit_line(sb, "static void %s(%s)", section->name, section->params);
    emit_open_block(sb);
    emit_section_prelude(sb, section, false);
    emit_section_ops(sb, section->ops, section->name, emit_c_op, &bf16);
    emit_close(sb, "");
    blank_line(sb);
}

/* The numbering of the timed ops, the stage's timer pointer and the hooks around each op. */
static void emit_op_profile_hooks(StrBuf *sb, int s, const StageSection *sections, int n_sections)
{
    emit_line(sb, "/* Per-op profile (run --profile-out): each section's ops are numbered from its OPS_");
    emit_line(sb, " * constant, as pr_stage_%d_ops names them. The runtime sets the timer only while it", s);
    emit_line(sb, " * profiles a training run; otherwise an op costs the test of a pointer. */");
    StrBuf bases = {0};
    int total = 0;
    for (int i = 0; i < n_sections; i++) {
        sb_printf(&bases, "OPS_%s = %d, ", sections[i].name, total);
        total += section_timed_ops(&sections[i]);
    }
    emit_line(sb, "enum { %sN_OPS = %d };", bases.data ? bases.data : "", total); // every stage has sections
    sb_free(&bases);
    emit_line(sb, "const pr_op_timer *pr_stage_%d_op_timer;", s);
    emit_line(sb, "#define OP_BEGIN(op) do { if (pr_stage_%d_op_timer) pr_stage_%d_op_timer->begin(STAGE, op); } while (0)",
              s, s);
    emit_line(sb, "#define OP_END(op) do { if (pr_stage_%d_op_timer) pr_stage_%d_op_timer->end(STAGE, op); } while (0)",
              s, s);
    blank_line(sb);
}

/* pr_stage_S_ops: section, name and comment of every timed op, in number order. */
static void emit_op_table(StrBuf *sb, const Config *cfg, int s, const StageSection *sections, int n_sections)
{
    emit_line(sb, "/* The ops as the profile names them: section, kernel (or gemm, zero, copy), what it computes. */");
    emit_line(sb, "const pr_op_info pr_stage_%d_ops[N_OPS] = {", s);
    sb->indent++;
    for (int i = 0; i < n_sections; i++) {
        const OpList *l = sections[i].ops;
        if (!l) {
            static const char *const step_of[] = {[PR_OPT_ADAMW] = "AdamW", [PR_OPT_MUON] = "Muon (or its AdamW group's)",
                                                  [PR_OPT_LAMB] = "LAMB", [PR_OPT_LARS] = "LARS",
                                                  [PR_OPT_NADAMW] = "NAdamW", [PR_OPT_LANS] = "LANS"};
            emit_line(sb, "{\"%s\", \"adamw\", \"%s update of one tensor\"},", sections[i].name,
                      step_of[cfg->optimizer]);
            continue;
        }
        for (int k = 0; k < l->n; k++) {
            if (!op_is_timed(&l->ops[k]))
                continue;
            StrBuf what = {0};
            emit_c_string(&what, l->ops[k].comment);
            emit_line(sb, "{\"%s\", \"%s\", %s},", sections[i].name, op_profile_name(&l->ops[k]), what.data);
            sb_free(&what);
        }
    }
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);
}

static void mark_kernels(const OpList *l, bool *used)
{
    for (int i = 0; i < l->n; i++)
        if (l->ops[i].kind == OP_KERNEL)
            used[l->ops[i].kernel - kernel_descs] = true;
}

/* The stage's step under muon, lamb, lars, nadamw or lans: the rule's constants, and one runtime
 * call per tensor (runtime/optim_rules.c), in the place and under the name of the AdamW step. */
static void emit_optim_rule(StrBuf *sb, const Config *cfg, int s, int n_tensors)
{
    static const char *const names[] = {"adamw", "muon", "lamb", "lars", "nadamw", "lans"};
    bool muon = cfg->optimizer == PR_OPT_MUON;
    emit_line(sb, "/* optimizer %s (docs/dsl.md): its constants, then one update per tensor. */",
              names[cfg->optimizer]);
    if (cfg->delay_correction == DELAY_NESTEROV) {
        emit_line(sb, "/* delay_correction nesterov: this stage's beta1 = %g + d (0.99 - %g) / p = %.6g, with",
                  cfg->beta1, cfg->beta1, stage_beta1(cfg, s));
        emit_line(sb, " * d = %d (the most optimizer steps a micro-batch's forward and backward straddle on",
                  cfg->stage_delay[s]);
        emit_line(sb, " * stage %d in the schedule table) and p = %d. */", s, cfg->stages);
    }
    emit_line(sb, "const pr_optim_rule pr_stage_%d_optim_rule = {", s);
    sb->indent++;
    emit_line(sb, ".kind = %d, .width = %d,", cfg->optimizer, cfg->width);
    emit_line(sb, ".beta1 = %s, .beta2 = %s,", exact_double(muon ? cfg->group_beta1 : stage_beta1(cfg, s)),
              exact_double(muon ? cfg->group_beta2 : cfg->beta2));
    emit_line(sb, ".eps = %s, .weight_decay = %s,", exact_double(muon ? cfg->group_eps : cfg->eps),
              exact_double(muon ? cfg->group_weight_decay : cfg->weight_decay));
    emit_line(sb, ".momentum = %s, .trust_coefficient = %s,", exact_double(cfg->momentum),
              exact_double(cfg->trust_coefficient));
    emit_line(sb, ".nesterov = %d, .ns_steps = %d, .shape_scale = %d,", cfg->nesterov, cfg->ns_steps,
              cfg->shape_scale);
    emit_line(sb, ".muon_weight_decay = %s,", exact_double(cfg->weight_decay));
    emit_line(sb, ".group_lr_ratio = %s, /* the AdamW group's lr %g over %g */",
              exact_double(cfg->group_lr / cfg->lr_base), cfg->group_lr, cfg->lr_base);
    emit_line(sb, ".momentum_decay = %s,", exact_double(cfg->momentum_decay));
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);
    emit_line(sb, "void pr_stage_%d_adamw(const pr_adamw_args *args)", s);
    emit_open_block(sb);
    emit_open(sb, "for (int i = 0; i < %d; i++)", n_tensors);
    emit_line(sb, "OP_BEGIN(OPS_adamw);");
    emit_line(sb, "pr_optim_step(&pr_stage_%d_optim_rule, &pr_stage_%d_tensors[i], args);", s, s);
    emit_line(sb, "OP_END(OPS_adamw);");
    emit_close(sb, "");
    emit_close(sb, "");
}

/* One layer's block of `what`: the att piece's entries, the proj piece's from `pieces[0]`
 * (with the att piece, the attention half), the fc piece's from `pieces[1]` (the MLP half's
 * start), then the GELU piece's from `pieces[2]` (each piece's offsets from its own start),
 * and the whole block's size as `per_layer`. */
static void emit_layer_layout(StrBuf *sb, const char *what, const char *block, const char *per_layer,
                              const char *const pieces[3], const Layout *const layout[4])
{
    emit_line(sb, "/* One layer's %s, at %s_LAYERS + l * %s: its att piece's (LayerNorm 1, qkv,", what, block,
              per_layer);
    emit_line(sb, " * attention), from %s its proj piece's (the attention projection), then from %s its", pieces[0],
              pieces[1]);
    emit_line(sb, " * MLP half's: its fc piece's (LayerNorm 2, the fc product), then from %s its GELU", pieces[2]);
    emit_line(sb, " * piece's (GELU, the projection); each piece's offsets from its start. */");
    long at = 0;
    for (int i = 0; i < 4; i++) {
        if (i > 0)
            emit_line(sb, "#define %s %ldL", pieces[i - 1], at);
        emit_layout(sb, layout[i]);
        at += layout[i]->total;
    }
    emit_line(sb, "#define %s %ldL", per_layer, at);
}

/* What the stage's code names: its includes, shapes, AdamW's constants, the kernels' macros as C
 * defines them, and the layout's offsets. */
static void emit_c_stage_constants(StrBuf *sb, const Config *cfg, const StagePlan *sp, int s, const StageLayout *lay)
{
    emit_line(sb, "#include <math.h>");
    emit_line(sb, "#include <string.h>");
    blank_line(sb);
    emit_line(sb, "#include \"pacirt.h\"");
    blank_line(sb);
    emit_line(sb, "/* Shapes: micro-batch, context, width, heads, head size, vocabulary (VP floats a row of");
    emit_line(sb, " * logits: V rounded up to 64); BT rows. */");
    emit_shape_constants(sb, cfg);
    emit_line(sb, "enum { STAGE = %d, FIRST_LAYER = %d, N_LAYERS = %d };", s, sp->first_layer, sp->n_layers);
    blank_line(sb);
    emit_line(sb, "/* AdamW hyperparameters (the learning rate and step come with each call). */");
    emit_line(sb, "#define ADAMW_BETA1 ((float)%.9g)", cfg->beta1);
    emit_line(sb, "#define ADAMW_BETA2 ((float)%.9g)", cfg->beta2);
    emit_line(sb, "#define ADAMW_EPS ((float)%.9g)", cfg->eps);
    emit_line(sb, "#define ADAMW_WEIGHT_DECAY ((float)%.9g)", cfg->weight_decay);
    blank_line(sb);
    emit_c_kernel_macros(sb);
    emit_line(sb, "/* The bf16 copies of product operands are the GPU path's: here kernels get none. The");
    emit_line(sb, " * activations only products read are kept in bf16 %s. */",
              cfg->precision == PREC_BF16 ? "(precision bf16), and widened for the BLAS" : "under bf16 only (not here)");
    emit_line(sb, "#define BF16_COPY(p) ((pr_bf16 *)0)");
    emit_line(sb, "#define BF16_STORE(p) %s", cfg->precision == PREC_BF16 ? "((pr_bf16 *)(p))" : "((pr_bf16 *)0)");
    blank_line(sb);
    emit_layer_layout(sb, "parameters", "PARAM", "PARAM_PER_LAYER", (const char *const[]){"P_PROJ", "P_MLP", "P_GELU"},
                      (const Layout *const[]){&lay->att_params, &lay->proj_params, &lay->fc_params, &lay->gelu_params});
    emit_layer_layout(sb, "saved activations", "ACT", "ACT_PER_LAYER", (const char *const[]){"A_PROJ", "A_MLP", "A_GELU"},
                      (const Layout *const[]){&lay->att_acts, &lay->proj_acts, &lay->fc_acts, &lay->gelu_acts});
    emit_line(sb, "/* The stage's parameter block (%ld floats). */", lay->params.total);
    emit_layout(sb, &lay->params);
    if (sp->has_head && cfg->tied)
        emit_line(sb, "#define PARAM_LM_HEAD PARAM_WTE /* tied: the head reads the token embedding */");
    if (stage_head_front(sp) || stage_head_back(sp)) {
        long rows = sp->vocab_end - sp->vocab_begin;
        emit_line(sb, "/* The vocabulary split: this stage's rows of the LM head, [HEAD_V0, HEAD_V0 + HEAD_VN), with");
        emit_line(sb, " * logits rows of HEAD_VP; the log-sum-exp in the backward message after d(lnf), at MSG_LSE. */");
        emit_line(sb, "#define HEAD_V0 %ld", sp->vocab_begin);
        emit_line(sb, "#define HEAD_VN %ld", rows);
        emit_line(sb, "#define HEAD_VP %ld", (rows + 63) / 64 * 64);
        emit_line(sb, "#define MSG_LSE %ldL", (long)head_message_floats(cfg, true) - (long)cfg->micro * cfg->context);
    }
    emit_line(sb, "/* One activation slot (%ld floats). */", lay->acts.total);
    emit_layout(sb, &lay->acts);
    emit_line(sb, "#define ACT_OUTPUT %ldL /* the stage's output: the last layer's resid3%s */", lay->out_offset,
              sp->tail_fc     ? " (here the trailing attention half's resid2, and after it the fc output)"
              : sp->tail_attn ? " (here the trailing attention half's resid2)"
              : sp->tail_atty ? " (here x and the trailing att piece's output, ACT_OUTPUT_ATTY)"
                              : "");
    if (sp->lead_gelu || sp->tail_fc)
        emit_line(sb, "#define MSG_DFC %ldL /* across the cut after an fc product: where the fc output (or its "
                      "gradient) starts in the message */", message_dfc_offset(cfg));
    if (sp->lead_proj || sp->tail_atty)
        emit_line(sb, "#define MSG_DATTY %ldL /* across the cut after attention: where the attention's output (or "
                      "its gradient) starts in the message */", message_dfc_offset(cfg));
    emit_line(sb, "/* Backward scratch (%ld floats). */", lay->scratch.total);
    emit_layout(sb, &lay->scratch);
    blank_line(sb);
}

/* The message back is complete: the runtime may send it now (pr_bwd_args.dx_ready), and the
 * first piece's late section (stage_late_piece) runs after it. */
static void emit_c_backward_late(StrBuf *sb, LatePiece late)
{
    emit_line(sb, "if (args->dx_ready) /* the gradient goes back while the last weight gradients are computed */");
    emit_line(sb, "    args->dx_ready(args->ready_ctx);");
    if (late == LATE_BLOCK)
        emit_line(sb, "block_backward_late(args->params + PARAM_LAYERS, args->grads + PARAM_LAYERS, args->acts + ACT_LAYERS, "
                      "layer_input(args->acts, 0), args->scratch);");
    else if (late == LATE_ATTN)
        emit_line(sb, "attn_backward_late(args->params + PARAM_TAIL_ATTN, args->grads + PARAM_TAIL_ATTN, "
                      "args->acts + ACT_TAIL_ATTN, layer_input(args->acts, N_LAYERS), args->scratch);");
    else if (late == LATE_MLP)
        emit_line(sb, "mlp_backward_late(args->params + PARAM_LEAD_MLP, args->grads + PARAM_LEAD_MLP, "
                      "args->acts + ACT_LEAD_MLP, args->acts + ACT_INPUT, args->scratch);");
    else if (late == LATE_PROJ) {
        emit_line(sb, "mlp_backward_late(args->params + PARAM_LEAD_MLP, args->grads + PARAM_LEAD_MLP, "
                      "args->acts + ACT_LEAD_MLP, args->acts + ACT_LEAD_PROJ + A_RESID2, args->scratch);");
        emit_line(sb, "proj_piece_backward_late(args->params + PARAM_LEAD_PROJ, args->grads + PARAM_LEAD_PROJ, "
                      "args->acts + ACT_LEAD_PROJ, args->acts + ACT_INPUT, args->scratch);");
    } else
        emit_line(sb, "gelu_piece_backward_late(args->params + PARAM_LEAD_GELU, args->grads + PARAM_LEAD_GELU, "
                      "args->acts + ACT_LEAD_GELU, args->acts + ACT_INPUT_FC, args->scratch);");
}

/* pr_stage_S_forward and _backward: the sections in order over the stage's layers. */
/* pr_stage_S_backward`part`: part "" the whole backward, "_b" a zero-bubble B (with the
 * messages in and out), "_w" its W (no message): the sections of that part, top down. */
static void emit_c_backward(StrBuf *sb, const Config *cfg, const StagePlan *sp, int s, const char *part)
{
    bool w = strcmp(part, "_w") == 0;
    emit_line(sb, "void pr_stage_%d_backward%s(const pr_bwd_args *args)", s, part);
    emit_open_block(sb);
    if (stage_head_front(sp))
        emit_line(sb, "head_front_backward%s(args->params, args->grads, args->acts, args->acts + ACT_OUTPUT, "
                      "args->scratch, args->targets, args->dx_out, args->loss_scale / (float)BT);", part);
    else if (stage_head_back(sp))
        emit_line(sb, "head_back_backward%s(args->params, args->grads, args->acts, args->acts + ACT_INPUT, "
                      "args->scratch, args->targets, args->dx_in, args->loss_scale / (float)BT);", part);
    else if (sp->has_head)
        emit_line(sb, "head_backward%s(args->params, args->grads, args->acts, args->acts + ACT_OUTPUT, "
                      "args->scratch, args->targets, args->loss_scale / (float)BT);", part);
    else if (w)
        ; // W reads no message
    else if (sends_residual(cfg, sp))
        emit_line(sb, "from_bf16((const pr_bf16 *)args->dx_out, args->scratch + S_DRES, (long)BT * C);");
    else
        emit_line(sb, "memcpy(args->scratch + S_DRES, args->dx_out, sizeof(float) * BT * C);");
    if (sp->tail_fc && !w) { // d fc comes with d(resid2)'s residual share
        if (sends_residual(cfg, sp))
            emit_line(sb, "from_bf16((const pr_bf16 *)args->dx_out + MSG_DFC, args->scratch + S_DFC, 4L * BT * C);");
        else
            emit_line(sb, "memcpy(args->scratch + S_DFC, args->dx_out + MSG_DFC, sizeof(float) * 4 * BT * C);");
    }
    if (sp->tail_atty && !w) { // d atty comes with d x's residual share
        if (sends_residual(cfg, sp))
            emit_line(sb, "from_bf16((const pr_bf16 *)args->dx_out + MSG_DATTY, args->scratch + S_DATTY, (long)BT * C);");
        else
            emit_line(sb, "memcpy(args->scratch + S_DATTY, args->dx_out + MSG_DATTY, sizeof(float) * BT * C);");
    }
    if (sp->tail_fc)
        emit_line(sb, "fc_piece_backward%s(args->params + PARAM_TAIL_ATTN + P_MLP, args->grads + PARAM_TAIL_ATTN + P_MLP, "
                      "args->acts + ACT_TAIL_ATTN + A_MLP, args->acts + ACT_TAIL_ATTN + A_PROJ + A_RESID2, args->scratch);", part);
    LatePiece late = *part ? LATE_NONE : stage_late_piece(sp, config_splits_backward(cfg));
    const char *down = late == LATE_NONE ? part : "_down"; /* the first piece's, under late */
    if (sp->tail_attn)
        emit_line(sb, "attn_backward%s(args->params + PARAM_TAIL_ATTN, args->grads + PARAM_TAIL_ATTN, "
                      "args->acts + ACT_TAIL_ATTN, layer_input(args->acts, N_LAYERS), args->scratch);",
                  late == LATE_ATTN ? down : part);
    if (sp->tail_atty)
        emit_line(sb, "att_piece_backward%s(args->params + PARAM_TAIL_ATTN, args->grads + PARAM_TAIL_ATTN, "
                      "args->acts + ACT_TAIL_ATTN, layer_input(args->acts, N_LAYERS), args->scratch);", part);
    if (late != LATE_BLOCK || sp->n_layers > 1) { // the block section (ops.c, stage_sections)
        emit_open(sb, "for (int l = N_LAYERS - 1; l >= %d; l--)", late == LATE_BLOCK);
        emit_line(sb, "block_backward%s(args->params + PARAM_LAYERS + l * PARAM_PER_LAYER, "
                      "args->grads + PARAM_LAYERS + l * PARAM_PER_LAYER,", part);
        emit_line(sb, "               %sargs->acts + ACT_LAYERS + l * ACT_PER_LAYER, layer_input(args->acts, l), args->scratch);",
                  *part ? "  " : "");
        emit_close(sb, "");
    }
    if (late == LATE_BLOCK)
        emit_line(sb, "block_backward_down(args->params + PARAM_LAYERS, args->grads + PARAM_LAYERS, args->acts + ACT_LAYERS, "
                      "layer_input(args->acts, 0), args->scratch);");
    if (sp->lead_mlp)
        emit_line(sb, "mlp_backward%s(args->params + PARAM_LEAD_MLP, args->grads + PARAM_LEAD_MLP, "
                      "args->acts + ACT_LEAD_MLP, args->acts + %s, args->scratch);",
                  late == LATE_MLP || late == LATE_PROJ ? down : part,
                  sp->lead_proj ? "ACT_LEAD_PROJ + A_RESID2" : "ACT_INPUT");
    if (sp->lead_gelu)
        emit_line(sb, "gelu_piece_backward%s(args->params + PARAM_LEAD_GELU, args->grads + PARAM_LEAD_GELU, "
                      "args->acts + ACT_LEAD_GELU, args->acts + ACT_INPUT_FC, args->scratch);", late == LATE_GELU ? down : part);
    if (sp->lead_proj)
        emit_line(sb, "proj_piece_backward%s(args->params + PARAM_LEAD_PROJ, args->grads + PARAM_LEAD_PROJ, "
                      "args->acts + ACT_LEAD_PROJ, args->acts + ACT_INPUT, args->scratch);", late == LATE_PROJ ? down : part);
    if (sp->has_embed && !*part)
        emit_line(sb, "embed_backward(args->grads, args->scratch, args->tokens);");
    else if (sp->has_embed)
        emit_line(sb, w ? "embed_backward_w(args->grads, args->acts, args->tokens);"
                        : "embed_backward_b(args->acts, args->scratch);");
    else if (w)
        ; // W sends no message
    else if (receives_residual(cfg, sp))
        emit_line(sb, "to_bf16(args->scratch + S_DRES, (pr_bf16 *)args->dx_in, (long)BT * C);");
    else if (!stage_head_back(sp)) /* the split's last stage wrote its message itself */
        emit_line(sb, "memcpy(args->dx_in, args->scratch + S_DRES, sizeof(float) * BT * C);");
    if (sp->lead_gelu && !w) { // and d fc, for the fc piece on the stage before
        if (receives_residual(cfg, sp))
            emit_line(sb, "to_bf16(args->scratch + S_DFC, (pr_bf16 *)args->dx_in + MSG_DFC, 4L * BT * C);");
        else
            emit_line(sb, "memcpy(args->dx_in + MSG_DFC, args->scratch + S_DFC, sizeof(float) * 4 * BT * C);");
    }
    if (sp->lead_proj && !w) { // and d atty, for the att piece on the stage before
        if (receives_residual(cfg, sp))
            emit_line(sb, "to_bf16(args->scratch + S_DATTY, (pr_bf16 *)args->dx_in + MSG_DATTY, (long)BT * C);");
        else
            emit_line(sb, "memcpy(args->dx_in + MSG_DATTY, args->scratch + S_DATTY, sizeof(float) * BT * C);");
    }
    if (late != LATE_NONE)
        emit_c_backward_late(sb, late);
    emit_close(sb, "");
    blank_line(sb);
}

/* atty's B T C values from `from` to `to` across the cut after attention: the stored activation
 * (bf16 where atty_stored_bf16) to the message's fp32, or (`why` given) the received fp32 to
 * the proj piece's stored copy. */
static void emit_c_atty_copy(StrBuf *sb, const Config *cfg, const char *from, const char *to, const char *why)
{
    if (!atty_stored_bf16(cfg))
        emit_line(sb, "memcpy(%s, %s, sizeof(float) * BT * C);", to, from);
    else if (why)
        emit_line(sb, "to_bf16(%s, (pr_bf16 *)(%s), (long)BT * C); /* %s */", from, to, why);
    else
        emit_line(sb, "from_bf16((const pr_bf16 *)(%s), %s, (long)BT * C);", from, to);
}

static void emit_c_stage_driver(StrBuf *sb, const Config *cfg, const StagePlan *sp, int s)
{
    emit_line(sb, "/* The input of layer l: the stage's input (or the leading MLP half's output) or the previous");
    emit_line(sb, " * layer's output. */");
    emit_line(sb, "static float *layer_input(float *acts, int l)");
    emit_open_block(sb);
    emit_line(sb, "return l == 0 ? acts + %s : acts + ACT_LAYERS + (long)(l - 1) * ACT_PER_LAYER + A_GELU + A_RESID3;",
              sp->lead_mlp    ? "ACT_LEAD_MLP + (A_GELU - A_MLP) + A_RESID3"
              : sp->lead_gelu ? "ACT_LEAD_GELU + A_RESID3"
                              : "ACT_INPUT");
    emit_close(sb, "");
    blank_line(sb);

    emit_line(sb, "void pr_stage_%d_forward(const pr_fwd_args *args)", s);
    emit_open_block(sb);
    if (sp->has_embed)
        emit_line(sb, "embed_forward(args->params, args->acts, args->tokens);");
    if (receives_residual(cfg, sp))
        emit_line(sb, "from_bf16((const pr_bf16 *)(args->acts + ACT_INPUT_MSG), args->acts + ACT_INPUT, %s); "
                      "/* the message came in bf16 */",
                  sp->lead_gelu ? "MSG_DFC + 4L * BT * C" : sp->lead_proj ? "MSG_DATTY + (long)BT * C" : "(long)BT * C");
    if (sp->lead_proj) {
        emit_c_atty_copy(sb, cfg, "args->acts + ACT_INPUT_ATTY", "args->acts + ACT_LEAD_PROJ + A_ATTY",
                         "the proj piece keeps atty as the att piece stored it");
        emit_line(sb, "proj_piece_forward(args->params + PARAM_LEAD_PROJ, args->acts + ACT_LEAD_PROJ, args->acts + ACT_INPUT);");
    }
    if (sp->lead_mlp)
        emit_line(sb, "mlp_forward(args->params + PARAM_LEAD_MLP, args->acts + ACT_LEAD_MLP, args->acts + %s);",
                  sp->lead_proj ? "ACT_LEAD_PROJ + A_RESID2" : "ACT_INPUT");
    if (sp->lead_gelu)
        emit_line(sb, "gelu_piece_forward(args->params + PARAM_LEAD_GELU, args->acts + ACT_LEAD_GELU, args->acts + ACT_INPUT, "
                      "args->acts + ACT_INPUT_FC);");
    emit_open(sb, "for (int l = 0; l < N_LAYERS; l++)");
    emit_line(sb, "block_forward(args->params + PARAM_LAYERS + l * PARAM_PER_LAYER, "
                  "args->acts + ACT_LAYERS + l * ACT_PER_LAYER, layer_input(args->acts, l));");
    emit_close(sb, "");
    if (sp->tail_attn)
        emit_line(sb, "attn_forward(args->params + PARAM_TAIL_ATTN, args->acts + ACT_TAIL_ATTN, "
                      "layer_input(args->acts, N_LAYERS));");
    if (sp->tail_fc)
        emit_line(sb, "fc_piece_forward(args->params + PARAM_TAIL_ATTN + P_MLP, args->acts + ACT_TAIL_ATTN + A_MLP, "
                      "args->acts + ACT_TAIL_ATTN + A_PROJ + A_RESID2);");
    if (sp->tail_atty) {
        emit_line(sb, "att_piece_forward(args->params + PARAM_TAIL_ATTN, args->acts + ACT_TAIL_ATTN, "
                      "layer_input(args->acts, N_LAYERS));");
        emit_line(sb, "memcpy(args->acts + ACT_OUTPUT, layer_input(args->acts, N_LAYERS), sizeof(float) * BT * C); "
                      "/* the message: x, then atty */");
        emit_c_atty_copy(sb, cfg, "args->acts + ACT_TAIL_ATTN + A_PROJ + A_ATTY", "args->acts + ACT_OUTPUT + MSG_DATTY",
                         NULL);
    }
    if (stage_head_front(sp))
        emit_line(sb, "head_front_forward(args->params, args->acts, args->acts + ACT_OUTPUT, args->targets);");
    else if (stage_head_back(sp))
        emit_line(sb, "head_back_forward(args->params, args->acts, args->acts + ACT_INPUT, args->targets, args->losses);");
    else if (sp->has_head)
        emit_line(sb, "head_forward(args->params, args->acts, args->acts + ACT_OUTPUT, args->targets, args->losses);");
    if (sends_residual(cfg, sp))
        emit_line(sb, "to_bf16(args->acts + ACT_OUTPUT, (pr_bf16 *)(args->acts + ACT_OUTPUT_MSG), %s); "
                      "/* the message goes in bf16 */",
                  sp->tail_fc ? "MSG_DFC + 4L * BT * C" : sp->tail_atty ? "MSG_DATTY + (long)BT * C" : "(long)BT * C");
    emit_close(sb, "");
    blank_line(sb);

    if (!config_splits_backward(cfg)) {
        emit_line(sb, "/* Gradients are added to args->grads; d(mean token loss) is scaled by loss_scale. */");
        emit_c_backward(sb, cfg, sp, s, "");
        return;
    }
    emit_line(sb, "/* B: the gradients of the stage's input and of its products' outputs, which it keeps in the");
    emit_line(sb, " * slot for W (zero-bubble); the LayerNorms' gains and biases here too. */");
    emit_c_backward(sb, cfg, sp, s, "_b");
    emit_line(sb, "/* W: the weights' gradients of the products, from what B kept in the slot. */");
    emit_c_backward(sb, cfg, sp, s, "_w");
    emit_line(sb, "/* The whole backward: B, then W. */");
    emit_line(sb, "void pr_stage_%d_backward(const pr_bwd_args *args)", s);
    emit_open_block(sb);
    emit_line(sb, "pr_stage_%d_backward_b(args);", s);
    emit_line(sb, "pr_stage_%d_backward_w(args);", s);
    emit_close(sb, "");
    blank_line(sb);
}

/* The stage file's banner: what the stage holds. */
static void emit_c_stage_banner(StrBuf *sb, const Config *cfg, const StagePlan *sp, int s, int stages)
{
    bool lead_any = sp->lead_mlp || sp->lead_gelu;
    char *lead = lead_any ? xasprintf("%s of layer %d%s",
                                      sp->lead_mlp ? "the MLP half" : "the GELU, MLP projection and residual",
                                      sp->first_layer - 1, sp->n_layers > 0 || sp->tail_attn ? ", " : "")
                          : xstrdup("");
    char *tail = sp->tail_attn ? xasprintf("%sthe attention half%s of layer %d", sp->n_layers > 0 ? ", " : "",
                                           sp->tail_fc ? ", LayerNorm 2 and the fc product" : "",
                                           sp->first_layer + sp->n_layers)
                               : xstrdup("");
    char *layers = sp->n_layers > 0 || (!lead_any && !sp->tail_attn)
                       ? xasprintf("%d layer%s [%d, %d)", sp->n_layers, sp->n_layers == 1 ? "" : "s",
                                   sp->first_layer, sp->first_layer + sp->n_layers)
                       : xstrdup("");
    char *what = xasprintf("Stage %d of %d: %s%s%s%s%s. Forward, backward and AdamW, specialised to the shapes below.",
                           s, stages, sp->has_embed ? "embedding, " : "", lead, layers, tail,
                           sp->has_head ? ", final LayerNorm, LM head and cross-entropy" : "");
    free(layers);
    free(lead);
    free(tail);
    emit_banner(sb, cfg, what);
    free(what);
}

/* The C kernels the stage's sections call (each once, in kernels.c's order). */
static void emit_c_stage_kernels(StrBuf *sb, const Config *cfg, const LoweredStage *ls, const ModelOps *ops)
{
    const StagePlan *sp = ls->plan;
    bool used[64] = {false};
    if (sp->has_embed) {
        mark_kernels(&ops->embed_fwd, used);
        mark_kernels(&ops->embed_bwd, used);
    }
    /* a stage with no layer still defines the block sections (the op numbering and the CUDA
     * host code name them), so it needs their kernels too */
    mark_kernels(&ops->block_fwd, used);
    mark_kernels(&ops->block_bwd, used);
    if (sp->lead_mlp) {
        mark_kernels(&ops->mlp_fwd, used);
        mark_kernels(&ops->mlp_bwd, used);
    }
    if (sp->tail_attn) {
        mark_kernels(&ops->attn_fwd, used);
        mark_kernels(&ops->attn_bwd, used);
    }
    for (int i = 0; i < ls->n_sections; i++) // the head's, whichever part it holds; a zero-bubble B's and W's
        if (ls->sections[i].ops)
            mark_kernels(ls->sections[i].ops, used);
    used[kernel_find("adamw") - kernel_descs] = cfg->optimizer == PR_OPT_ADAMW;
    if (receives_residual(cfg, sp) || sends_residual(cfg, sp) ||
        ((sp->lead_proj || sp->tail_atty) && atty_stored_bf16(cfg))) { // the driver converts the messages, or atty
        used[kernel_find("to_bf16") - kernel_descs] = true;
        used[kernel_find("from_bf16") - kernel_descs] = true;
    }
    for (int i = 0; i < kernel_desc_count; i++)
        if (used[i])
            emit_c_kernel(sb, &kernel_descs[i]);
    if (cfg->attention != ATTN_FLASH) { // the block sections, which every stage defines, call them
        emit_c_text(sb, causal_gemm_source);
        blank_line(sb);
        emit_line(sb, "/* The bases a parallel loop's iterations read and write (pr_parallel_for's ctx). */");
        emit_line(sb, "typedef struct parallel_bases {");
        emit_line(sb, "    float *a, *s;");
        emit_line(sb, "} parallel_bases;");
        blank_line(sb);
    }
}

void emit_c_stage(StrBuf *sb, const Config *cfg, const Lowered *low, int s)
{
    const LoweredStage *ls = &low->stage[s];
    const StagePlan *sp = ls->plan;
    const StageSection *sections = ls->sections;
    int n_sections = ls->n_sections;
    bool bf16 = cfg->precision == PREC_BF16;
    emit_c_stage_banner(sb, cfg, sp, s, low->stages);
    emit_c_stage_constants(sb, cfg, sp, s, &ls->layout);
    emit_c_stage_kernels(sb, cfg, ls, &low->ops);
    emit_op_profile_hooks(sb, s, sections, n_sections);

    for (int i = 0; i < n_sections; i++)
        if (sections[i].ops)
            emit_c_section(sb, &sections[i], bf16);

    emit_c_stage_driver(sb, cfg, sp, s);

    emit_line(sb, "/* name, checkpoint tensor, offset in it, offset in the block, size, decay, init */");
    emit_line(sb, "const pr_tensor pr_stage_%d_tensors[%d] = {", s, ls->n_tensors);
    sb->indent++;
    for (int i = 0; i < ls->n_tensors; i++) {
        const TensorInfo *t = &ls->tensors[i];
        emit_line(sb, "{\"%s\", %s, %ld, %ld, %ld, %d, %s},", t->name, t->ckpt_tensor,
                  t->ckpt_offset, t->offset, t->size, t->decay, t->init);
    }
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);
    emit_op_table(sb, cfg, s, sections, n_sections);

    int n = ls->n_tensors;
    if (cfg->optimizer != PR_OPT_ADAMW) {
        emit_optim_rule(sb, cfg, s, n);
        return;
    }
    emit_line(sb, "/* AdamW on every tensor of the stage; weight decay where the table says so. */");
    emit_line(sb, "void pr_stage_%d_adamw(const pr_adamw_args *args)", s);
    emit_open_block(sb);
    emit_line(sb, "float beta1_correction = (float)(1.0 - pow(%s, (double)args->t));", exact_double(cfg->beta1));
    emit_line(sb, "float beta2_correction = (float)(1.0 - pow(%s, (double)args->t));", exact_double(cfg->beta2));
    emit_open(sb, "for (int i = 0; i < %d; i++)", n);
    emit_line(sb, "const pr_tensor *t = &pr_stage_%d_tensors[i];", s);
    emit_line(sb, "OP_BEGIN(OPS_adamw);");
    emit_line(sb, "adamw(args->params + t->offset, args->grads + t->offset, args->m + t->offset, "
                  "args->v + t->offset, t->size,");
    emit_line(sb, "      args->lr, t->decay ? ADAMW_WEIGHT_DECAY : 0.0f, args->grad_scale, "
                  "beta1_correction, beta2_correction, NULL);");
    emit_line(sb, "OP_END(OPS_adamw);");
    emit_close(sb, "");
    emit_close(sb, "");
}

static const char *const op_enum_names[] = {
#define OP_ENUM_NAME(name, text) "PACI_OP_" #name,
    PACI_OPS(OP_ENUM_NAME)
#undef OP_ENUM_NAME
};

static const char *const schedule_enum_names[] = {
#define SCHED_ENUM_NAME(name, text, sync) "PACI_SCHED_" #name,
    PACI_SCHEDULES(SCHED_ENUM_NAME)
#undef SCHED_ENUM_NAME
};

static const char *const placement_enum_names[] = {
#define PLACEMENT_ENUM_NAME(name, text) "PACI_PLACEMENT_" #name,
    PACI_PLACEMENTS(PLACEMENT_ENUM_NAME)
#undef PLACEMENT_ENUM_NAME
};

static const bool schedule_sync[] = {
#define SCHED_SYNC(name, text, sync) sync,
    PACI_SCHEDULES(SCHED_SYNC)
#undef SCHED_SYNC
};

/* Counts the parts (program, stage, prologue/body/epilogue) that start at instruction i
 * and, when `comments` is given, writes a comment line naming each. */
static int parts_starting_at(const paci_table *t, int i, StrBuf *comments)
{
    static const char *const part_names[] = {"prologue", "body", "epilogue"};
    int found = 0;
    for (int p = 0; p < t->n_programs; p++)
        for (int s = 0; s < t->devices; s++) {
            const paci_stage_program *sp = &t->program[p].device[s];
            const int32_t start[3] = {sp->prologue, sp->body, sp->epilogue};
            const int32_t count[3] = {sp->n_prologue, sp->n_body, sp->n_epilogue};
            for (int k = 0; k < 3; k++)
                if (count[k] > 0 && start[k] == i) {
                    found++;
                    if (comments)
                        emit_line(comments, "/* program %d, device %d, %s: %d instructions */", p, s,
                                  part_names[k], count[k]);
                }
        }
    return found;
}

static void emit_schedule(StrBuf *sb, const paci_table *t)
{
    if (t->n_instrs > 0) {
        emit_line(sb, "/* {op, stage, slot, aux, mb} */");
        emit_line(sb, "static const paci_instr instrs[%d] = {", t->n_instrs);
        sb->indent++;
        int on_line = 0;
        for (int i = 0; i < t->n_instrs; i++) {
            if (parts_starting_at(t, i, NULL) > 0) {
                if (on_line)
                    sb_puts(sb, "\n");
                on_line = 0;
                parts_starting_at(t, i, sb);
            }
            const paci_instr *in = &t->instrs[i];
            if (on_line == 0)
                for (int k = 0; k < sb->indent; k++)
                    sb_puts(sb, "    ");
            else
                sb_puts(sb, " ");
            sb_printf(sb, "{%s, %d, %d, %d, %lld},", op_enum_names[in->op], in->stage, in->slot, in->aux,
                      (long long)in->mb);
            if (++on_line == 4) {
                sb_puts(sb, "\n");
                on_line = 0;
            }
        }
        if (on_line)
            sb_puts(sb, "\n");
        sb->indent--;
        emit_line(sb, "};");
        blank_line(sb);
    }
    emit_line(sb, "static const paci_table schedule = {");
    sb->indent++;
    emit_line(sb, ".schedule = %s,", schedule_enum_names[t->schedule]);
    emit_line(sb, ".stages = %d,", t->stages);
    emit_line(sb, ".devices = %d, .chunks = %d, .placement = %s,", t->devices, t->chunks,
              placement_enum_names[t->placement]);
    StrBuf where = {0};
    for (int s = 0; s < t->stages; s++)
        sb_printf(&where, "%s%d", s ? ", " : "", t->stage_device[s]);
    emit_line(sb, ".stage_device = {%s},", where.data ? where.data : "0");
    sb_free(&where);
    emit_line(sb, ".window = %d,", t->window);
    emit_line(sb, ".total_steps = %d,", t->total_steps);
    emit_line(sb, ".segment_steps = %d,", t->segment_steps);
    if (t->warm_steps > 0)
        emit_line(sb, ".warm_steps = %d, .warm_schedule = %s, /* the warm start: steps [0, %d) */", t->warm_steps,
                  schedule_enum_names[t->warm_schedule], t->warm_steps);
    emit_line(sb, ".channel_capacity = %d,", t->channel_capacity);
    StrBuf slots = {0}, stash = {0};
    for (int s = 0; s < t->stages; s++) {
        sb_printf(&slots, "%s%d", s ? ", " : "", t->slots[s]);
        sb_printf(&stash, "%s%d", s ? ", " : "", t->stash[s]);
    }
    emit_line(sb, ".slots = {%s},", slots.data ? slots.data : "0");
    emit_line(sb, ".stash = {%s},", stash.data ? stash.data : "0");
    sb_free(&slots);
    sb_free(&stash);
    emit_line(sb, ".n_programs = %d,", t->n_programs);
    emit_line(sb, ".program = {");
    sb->indent++;
    for (int p = 0; p < t->n_programs; p++) {
        const paci_program *pr = &t->program[p];
        emit_line(sb, "{.schedule = %s, .steps = %d, .body_reps = %d, .device = {", schedule_enum_names[pr->schedule],
                  pr->steps, pr->body_reps);
        sb->indent++;
        for (int s = 0; s < t->devices; s++) {
            const paci_stage_program *sp = &pr->device[s];
            emit_line(sb, "{%d, %d, %d, %d, %d, %d}, /* device %d: prologue, body, epilogue (start, count) */",
                      sp->prologue, sp->n_prologue, sp->body, sp->n_body, sp->epilogue,
                      sp->n_epilogue, s);
        }
        sb->indent--;
        emit_line(sb, "}},");
    }
    sb->indent--;
    emit_line(sb, "},");
    emit_line(sb, ".n_instrs = %d,", t->n_instrs);
    emit_line(sb, ".instrs = %s,", t->n_instrs > 0 ? "instrs" : "NULL");
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);
}

/* The declarations of what each stage file defines. */
static void emit_stage_declarations(StrBuf *sb, const Config *cfg, const Lowered *low)
{
    const Plan *plan = low->plan;
    for (int s = 0; s < plan->stages; s++) {
        emit_line(sb, "extern const pr_tensor pr_stage_%d_tensors[%d];", s, low->stage[s].n_tensors);
        emit_line(sb, "void pr_stage_%d_forward(const pr_fwd_args *args);", s);
        emit_line(sb, "void pr_stage_%d_backward(const pr_bwd_args *args);", s);
        emit_line(sb, "void pr_stage_%d_adamw(const pr_adamw_args *args);", s);
        emit_line(sb, "extern const pr_op_info pr_stage_%d_ops[%d];", s, low->stage[s].n_ops);
        emit_line(sb, "extern const pr_op_timer *pr_stage_%d_op_timer;", s);
        if (config_splits_backward(cfg)) {
            emit_line(sb, "void pr_stage_%d_backward_b(const pr_bwd_args *args);", s);
            emit_line(sb, "void pr_stage_%d_backward_w(const pr_bwd_args *args);", s);
            if (cfg->cuda) {
                emit_line(sb, "void pr_stage_%d_cuda_backward_b(const pr_bwd_args *args);", s);
                emit_line(sb, "void pr_stage_%d_cuda_backward_w(const pr_bwd_args *args);", s);
            }
        }
        if (cfg->optimizer != PR_OPT_ADAMW)
            emit_line(sb, "extern const pr_optim_rule pr_stage_%d_optim_rule;", s);
        if (cfg->cuda) {
            emit_line(sb, "void pr_stage_%d_cuda_forward(const pr_fwd_args *args);", s);
            emit_line(sb, "void pr_stage_%d_cuda_backward(const pr_bwd_args *args);", s);
            emit_line(sb, "void pr_stage_%d_cuda_adamw(const pr_adamw_args *args);", s);
            emit_line(sb, "void pr_stage_%d_cuda_weight_copy(const float *params, pr_bf16 *params_h);", s);
            if (cfg->delay_correction == DELAY_PREDICT)
                emit_line(sb, "void pr_stage_%d_cuda_predict(const pr_optim_rule *rule, const pr_predict_args *args);", s);
        }
    }
}

/* stages[]: each stage's code and sizes as the runtime's pr_stage_code. */
static void emit_stage_codes(StrBuf *sb, const Config *cfg, const Lowered *low)
{
    const Plan *plan = low->plan;
    emit_line(sb, "static const pr_stage_code stages[%d] = {", plan->stages);
    sb->indent++;
    for (int s = 0; s < plan->stages; s++) {
        const StagePlan *sp = &plan->stage[s];
        const StageLayout *lay = &low->stage[s].layout;
        emit_open_block(sb);
        emit_line(sb, ".index = %d, .first_layer = %d, .n_layers = %d, .has_embed = %d, .has_head = %d,",
                  s, sp->first_layer, sp->n_layers, sp->has_embed, sp->has_head);
        emit_line(sb, ".n_params = %ld, .act_floats = %ld, .scratch_floats = %ld,", lay->params.total,
                  lay->acts.total, lay->scratch.total);
        emit_line(sb, ".in_offset = %ld, .out_offset = %ld, .probs_offset = %ld,", lay->in_offset,
                  lay->msg_offset, lay->probs_offset);
        bool cut_inside = sp->tail_fc || sp->lead_gelu || sp->tail_atty || sp->lead_proj ||
                          (s > 0 && (plan->stage[s - 1].tail_fc || plan->stage[s - 1].tail_atty));
        if (plan->vocab_split > 0 || cfg->messages != MESSAGES_FP32 || cut_inside) // the others' stay as they were
            emit_line(sb, ".out_floats = %ld, .dx_floats = %ld, .has_lnf = %d, .vocab_begin = %ld, .vocab_end = %ld, "
                          ".lse_offset = %ld,", lay->out_floats, lay->dx_floats, sp->has_lnf, sp->vocab_begin,
                      sp->vocab_end, lay->lse_offset);
        emit_line(sb, ".n_tensors = %d, .tensors = pr_stage_%d_tensors,", low->stage[s].n_tensors, s);
        emit_line(sb, ".forward = pr_stage_%d_forward, .backward = pr_stage_%d_backward, .adamw = pr_stage_%d_adamw,",
                  s, s, s);
        emit_line(sb, ".n_ops = %d, .ops = pr_stage_%d_ops, .op_timer = &pr_stage_%d_op_timer,",
                  low->stage[s].n_ops, s, s);
        if (cfg->optimizer != PR_OPT_ADAMW)
            emit_line(sb, ".optim_rule = &pr_stage_%d_optim_rule,", s);
        if (config_splits_backward(cfg))
            emit_line(sb, ".backward_b = pr_stage_%d_backward_b, .backward_w = pr_stage_%d_backward_w,", s, s);
        emit_close(sb, ",");
    }
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);

}

/* cuda_stages[]: each stage's GPU images and launch sequences (the GPU path only). */
static void emit_cuda_stage_codes(StrBuf *sb, const Config *cfg, const Plan *plan)
{
    emit_line(sb, "/* The GPU path: images in cuda_images.c, launch sequences in the stage files. */");
    const char *const *archs;
    int cuda_arch_count = cuda_arch_list(&archs);
    emit_line(sb, "extern const pr_cuda_image pr_cuda_images[%d];", cuda_arch_count);
    emit_line(sb, "extern const char *const pr_cuda_kernel_names[%d];", kernel_desc_count);
    emit_line(sb, "static const pr_cuda_stage cuda_stages[%d] = {", plan->stages);
    sb->indent++;
    for (int s = 0; s < plan->stages; s++) {
        char predict[48] = "NULL"; // the prediction's code exists under delay_correction predict only
        if (cfg->delay_correction == DELAY_PREDICT)
            snprintf(predict, sizeof predict, "pr_stage_%d_cuda_predict", s);
        char split[96] = ""; // zero-bubble: the backward's B and W
        if (config_splits_backward(cfg))
            snprintf(split, sizeof split, ", pr_stage_%d_cuda_backward_b, pr_stage_%d_cuda_backward_w", s, s);
        emit_line(sb, "{%d, pr_cuda_images, %d, pr_cuda_kernel_names, pr_stage_%d_cuda_forward, "
                      "pr_stage_%d_cuda_backward, pr_stage_%d_cuda_adamw, pr_stage_%d_cuda_weight_copy, %s%s},",
                  cuda_arch_count, kernel_desc_count, s, s, s, s, predict, split);
    }
    sb->indent--;
    emit_line(sb, "};");
    blank_line(sb);
}

/* pr_generated_program: the model, the derived hyperparameters, the data, the stages. */
static void emit_program_struct(StrBuf *sb, const Config *cfg, const Plan *plan)
{
    emit_line(sb, "const pr_program pr_generated_program = {");
    sb->indent++;
    emit_string_field(sb, "source", cfg->src ? cfg->src->path : NULL);
    emit_line(sb, ".layers = %d, .width = %d, .heads = %d, .context = %d, .vocab = %d, .tied = %d,",
              cfg->layers, cfg->width, cfg->heads, cfg->context, cfg->vocab, cfg->tied);
    emit_line(sb, ".probs_stride = %ld, /* the vocabulary rounded up to 64 */", vocab_stride(cfg));
    emit_line(sb, ".micro = %d,", cfg->micro);
    emit_line(sb, ".steps = %ld,", cfg->steps);
    emit_line(sb, ".lr = %s, /* %g at global batch %ld, scaled to %ld */", exact_double(cfg->lr), cfg->lr_base,
              cfg->lr_base_batch, cfg->global_batch);
    emit_line(sb, ".min_lr_ratio = %s,", exact_double(cfg->min_lr_ratio));
    emit_line(sb, ".warmup_steps = %ld,", cfg->warmup_steps);
    emit_line(sb, ".decay = %d,", cfg->lr_decay);
    emit_line(sb, ".beta1 = %s, .beta2 = %s, .eps = %s, .weight_decay = %s, .grad_clip = %s,",
              exact_double(cfg->beta1), exact_double(cfg->beta2), exact_double(cfg->eps),
              exact_double(cfg->weight_decay), exact_double(cfg->grad_clip));
    emit_line(sb, ".global_clip = %d, /* clip by the norm over all stages: in synchronous programs only */",
              schedule_sync[cfg->schedule] || cfg->warm_steps > 0);
    emit_line(sb, ".post_validation = %d, /* step without waiting for the global norm, redo the rare clipped step */",
              cfg->post_validation);
    emit_line(sb, ".eval_every = %ld, .eval_batches = %ld, .ckpt_every = %ld, .ckpt_keep = %ld,",
              cfg->eval_every, cfg->eval_batches, cfg->ckpt_every, cfg->ckpt_keep);
    emit_line(sb, ".seed = %lluULL,", (unsigned long long)cfg->seed);
    emit_line(sb, ".on_nan = %d, /* 0: stop, 1: skip the step */", cfg->on_nan);
    emit_line(sb, ".data_order = %d, /* 0: the file's order, 1: shuffled per epoch by seed */", cfg->data_order);
    if (cfg->optimizer != PR_OPT_ADAMW)
        emit_line(sb, ".optimizer = %d, /* enum pr_optimizer: state.bin records it */", cfg->optimizer);
    emit_data_path(sb, "train_data", cfg->train_data);
    emit_data_path(sb, "val_data", cfg->val_data);
    emit_string_field(sb, "ckpt_dir", cfg->ckpt_dir);
    emit_line(sb, ".stages = %d,", plan->stages);
    emit_line(sb, ".stage = stages,");
    emit_line(sb, ".schedule = &schedule,");
    /* only with data parallelism, so that one pipeline's program is what it was before D existed */
    if (config_replicas(cfg) > 1)
        emit_line(sb, ".replicas = %d, /* parallel { data D }: copies of the pipeline, rank = replica x %d + stage */",
                  config_replicas(cfg), plan->stages);
    /* only when on, so that every program without it is what it was before recompute existed */
    if (cfg->recompute == RECOMPUTE_FULL)
        emit_line(sb, ".recompute = 1, /* recompute full: slots keep inputs, the backward reruns the forward */");
    if (cfg->accumulate == ACCUMULATE_PAIRWISE)
        emit_line(sb, ".accumulate_pairwise = 1, /* a window's gradients summed as a binary tree */");
    if (cfg->delay_correction == DELAY_DC_ASGD)
        emit_line(sb, ".dc_asgd = 1, .dc_lambda = %s, /* delay_correction dc-asgd: a forward's +d corrects its "
                  "backward */", exact_double(cfg->dc_lambda));
    if (cfg->compression == COMPRESSION_DGC)
        emit_line(sb, ".dgc_density = %.17g, .dgc_warmup_steps = %ld, .dgc_clip = %.17g, /* compression dgc */",
                  cfg->dgc_density, cfg->dgc_warmup_steps, cfg->dgc_clip);
    if (cfg->cuda)
        emit_line(sb, ".cuda = cuda_stages, .cuda_device = &pr_device_cuda, .bf16_operands = %d,",
                  cfg->precision == PREC_BF16);
    sb->indent--;
    emit_line(sb, "};");
}

void emit_c_program(StrBuf *sb, const Config *cfg, const Lowered *low, const paci_table *t)
{
    emit_banner(sb, cfg, "The run: model and training hyperparameters (already derived), the stages' "
                         "code and memory sizes, and the static schedule table.");
    emit_line(sb, "#include <stddef.h>");
    blank_line(sb);
    emit_line(sb, "#include \"pacirt.h\"");
    blank_line(sb);
    emit_stage_declarations(sb, cfg, low);
    blank_line(sb);
    emit_schedule(sb, t);
    emit_stage_codes(sb, cfg, low);
    if (cfg->cuda)
        emit_cuda_stage_codes(sb, cfg, low->plan);
    emit_program_struct(sb, cfg, low->plan);
}

/* Priced by the cost model's counts (costs.c), timed by runtime/calibrate.c: GELU and LayerNorm
 * forward over B T = 256 rows of C = 256, the kernels generated code runs. */
void emit_calibration_program(StrBuf *sb)
{
    Config shape = {.micro = 4, .context = 64, .width = 256, .heads = 4, .vocab = 256};
    double bytes;
    double flops = kernel_counted_flops(&shape, "gelu_forward", 256, &bytes) +
                   kernel_counted_flops(&shape, "layernorm_forward", 256, &bytes);
    emit_line(sb, "/* Generated by pacic %s calibrate-cpu: this machine's rates for the CPU cost model. */",
              PACIC_VERSION);
    emit_line(sb, "#include <math.h>");
    emit_line(sb, "#include <stdlib.h>");
    emit_line(sb, "#include \"pacirt.h\"");
    emit_shape_constants(sb, &shape);
    emit_c_kernel_macros(sb);
    emit_line(sb, "#define BF16_COPY(p) ((pr_bf16 *)0)");
    emit_line(sb, "#define BF16_STORE(p) ((pr_bf16 *)0)");
    blank_line(sb);
    emit_c_kernel(sb, kernel_find("gelu_forward"));
    emit_c_kernel(sb, kernel_find("layernorm_forward"));
    emit_line(sb, "static float *pre, *act, *inp, *out, *mean, *rstd, *weight, *bias;");
    emit_line(sb, "/* One call of each; the FLOPs costs.c counts for them. */");
    emit_line(sb, "static double vector(void)");
    emit_open_block(sb);
    emit_line(sb, "gelu_forward(pre, act, 0);");
    emit_line(sb, "layernorm_forward(out, mean, rstd, inp, weight, bias, 0);");
    emit_line(sb, "return %.17g;", flops);
    emit_close(sb, "");
    blank_line(sb);
    emit_line(sb, "static float *filled(long n, float value)");
    emit_open_block(sb);
    emit_line(sb, "float *p = malloc((size_t)n * sizeof(float));");
    emit_line(sb, "if (!p) exit(1);");
    emit_line(sb, "for (long i = 0; i < n; i++) p[i] = value + (float)(i %% 13) * 0.01f;");
    emit_line(sb, "return p;");
    emit_close(sb, "");
    blank_line(sb);
    emit_line(sb, "int main(int argc, char **argv)");
    emit_open_block(sb);
    emit_line(sb, "pre = filled((long)BT * 4 * C, 0.5f); act = filled((long)BT * 4 * C, 0);");
    emit_line(sb, "inp = filled((long)BT * C, 0.5f); out = filled((long)BT * C, 0);");
    emit_line(sb, "mean = filled(BT, 0); rstd = filled(BT, 0); weight = filled(C, 1); bias = filled(C, 0);");
    emit_line(sb, "return pr_calibrate_main(argc, argv, vector);");
    emit_close(sb, "");
}
