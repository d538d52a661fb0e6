/* diag.c: the one error printer (file:line:col, the source line, a ^~~~ underline) and
 * did-you-mean suggestions. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "pacic.h"

enum { TAB_STOP = 8 };
/* Past this many errors nothing more is printed (but errors are still counted): a flood
 * helps nobody, and placing each message in a huge file costs time. */
enum { MAX_PRINTED_ERRORS = 100 };

static FILE *diag_stream;
static int error_count;

static const char *const level_names[] = {
    [DIAG_ERROR] = "error",
    [DIAG_WARNING] = "warning",
    [DIAG_NOTE] = "note",
};

static FILE *stream(void)
{
    return diag_stream ? diag_stream : stderr;
}

void diag_set_stream(FILE *f)
{
    diag_stream = f;
}

int diag_error_count(void)
{
    return error_count;
}

void diag_reset(void)
{
    error_count = 0;
}

/* True once the error cap is passed; says so once. */
static bool silenced(FILE *out, DiagLevel level)
{
    if (level == DIAG_ERROR)
        error_count++;
    if (error_count <= MAX_PRINTED_ERRORS)
        return false;
    if (level == DIAG_ERROR && error_count == MAX_PRINTED_ERRORS + 1) {
        fprintf(out, "pacic: too many errors (%d); the rest are not shown\n", MAX_PRINTED_ERRORS);
        fflush(out);
    }
    return true;
}

/* Clamps an offset into [0, len] so that any span, even a broken one, prints. */
static int clamp_offset(const Source *src, int offset)
{
    if (offset < 0)
        return 0;
    if ((size_t)offset > src->len)
        return (int)src->len;
    return offset;
}

/* Lines are counted by '\n'; the column is the byte offset in the line, from 1. */
void diag_line_col(const Source *src, int offset, int *line, int *col)
{
    LineCursor cursor = {0};
    line_cursor_find(&cursor, src, offset, line, col);
}

/* Scans on from the last offset asked for, so a caller walking forward (the token and tree
 * dumps) pays once for the whole text instead of once per position. */
void line_cursor_find(LineCursor *cursor, const Source *src, int offset, int *line, int *col)
{
    offset = clamp_offset(src, offset);
    if (cursor->line == 0 || offset < cursor->offset)
        *cursor = (LineCursor){.offset = 0, .line = 1, .line_start = 0};
    for (int i = cursor->offset; i < offset; i++) {
        if (src->text[i] == '\n') {
            cursor->line++;
            cursor->line_start = i + 1;
        }
    }
    cursor->offset = offset;
    *line = cursor->line;
    *col = offset - cursor->line_start + 1;
}

/* UTF-8 continuation bytes take no column of their own on a terminal. */
static bool is_continuation(unsigned char c)
{
    return (c & 0xC0) == 0x80;
}

/* Prints the source line holding `span.begin` with tabs expanded to TAB_STOP columns and
 * control bytes shown as '?', then an underline below the part of the span on that line. */
static void print_source_line(FILE *out, const Source *src, Span span)
{
    int begin = clamp_offset(src, span.begin);
    int end = clamp_offset(src, span.end < span.begin ? span.begin : span.end);
    int line_start = begin;
    while (line_start > 0 && src->text[line_start - 1] != '\n')
        line_start--;
    int line_end = begin;
    while ((size_t)line_end < src->len && src->text[line_end] != '\n')
        line_end++;
    if (end > line_end)
        end = line_end;

    StrBuf text = {0}, mark = {0};
    int column = 0;
    for (int i = line_start; i <= line_end; i++) {
        bool in_span = i >= begin && (i < end || (i == begin && end == begin));
        if (i == line_end) { /* the position just past the line, for an empty span at EOL */
            if (in_span)
                sb_puts(&mark, "^");
            break;
        }
        unsigned char c = (unsigned char)src->text[i];
        int width = 1;
        if (c == '\t') {
            width = TAB_STOP - column % TAB_STOP;
            for (int k = 0; k < width; k++)
                sb_puts(&text, " ");
        } else if (c == '\r' && i + 1 == line_end) {
            width = 0; /* a CRLF line ending */
        } else if (c < 0x20 || c == 0x7F) {
            sb_puts(&text, "?");
        } else if (c >= 0x80 && is_continuation(c)) {
            sb_printf(&text, "%c", c);
            width = 0;
        } else {
            sb_printf(&text, "%c", c);
        }
        for (int k = 0; k < width; k++)
            sb_puts(&mark, !in_span ? " " : (i == begin && k == 0) ? "^" : "~");
        column += width;
    }
    /* trailing blanks of the underline carry no information */
    while (mark.len > 0 && mark.data[mark.len - 1] == ' ')
        mark.data[--mark.len] = '\0';
    fprintf(out, "%s\n%s\n", text.data ? text.data : "", mark.data ? mark.data : "^");
    sb_free(&text);
    sb_free(&mark);
}

/* A span with begin < 0 stands for the whole file: no line, no underline. */
void diag_at(const Source *src, Span span, DiagLevel level, const char *fmt, ...)
{
    FILE *out = stream();
    if (silenced(out, level))
        return;
    if (span.begin < 0) {
        fprintf(out, "%s: %s: ", src->path, level_names[level]);
    } else {
        int line, col;
        diag_line_col(src, span.begin, &line, &col);
        fprintf(out, "%s:%d:%d: %s: ", src->path, line, col, level_names[level]);
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    if (span.begin >= 0)
        print_source_line(out, src, span);
    fflush(out);
}

void diag_plain(DiagLevel level, const char *fmt, ...)
{
    FILE *out = stream();
    if (silenced(out, level))
        return;
    fprintf(out, "pacic: %s: ", level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fputc('\n', out);
    fflush(out);
}

/* Optimal string alignment distance: insertions, deletions, substitutions and swaps of
 * neighbours each cost 1 (so "1fb1" is one edit from "1f1b"). */
static int edit_distance(const char *a, const char *b)
{
    size_t n = strlen(a), m = strlen(b);
    if (n > 64 || m > 64) /* long words are never typos of our short names */
        return 1000;
    int d[65][65];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int cost = a[i - 1] != b[j - 1];
            int best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (d[i - 1][j - 1] + cost < best)
                best = d[i - 1][j - 1] + cost;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* A suggestion must be closer than a third of the word's length (at least one edit). */
const char *did_you_mean(const char *word, const char *const *candidates)
{
    int limit = (int)strlen(word) / 3;
    if (limit < 1)
        limit = 1;
    const char *best = NULL;
    int best_distance = limit + 1;
    for (int i = 0; candidates[i]; i++) {
        int d = edit_distance(word, candidates[i]);
        if (d < best_distance) {
            best_distance = d;
            best = candidates[i];
        }
    }
    return best;
}
