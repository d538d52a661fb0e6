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
    // memchr, not a byte loop: every error message places itself, and under the fuzzers'
    // instrumentation a loop's compare per byte was a third of the front end's time.
    for (const char *at = src->text + cursor->offset, *stop = src->text + offset;
         at < stop && (at = memchr(at, '\n', (size_t)(stop - at))) != NULL; at++) {
        cursor->line++;
        cursor->line_start = (int)(at - src->text) + 1;
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

/* A source line longer than this many bytes is shown as a window of it around the span, with
 * "..." where it is cut: a minified or generated file's one huge line helps nobody whole, and
 * each of up to MAX_PRINTED_ERRORS messages would copy it again. */
enum { MAX_SHOWN_LINE = 160, SHOWN_BEFORE_SPAN = 60 };

/* Prints the source line holding `span.begin` (a window of it when long) with tabs expanded
 * to TAB_STOP columns and control bytes shown as '?', then an underline below the part of the
 * span on that line. */
static void print_source_line(FILE *out, const Source *src, Span span)
{
    int begin = clamp_offset(src, span.begin);
    int end = clamp_offset(src, span.end < span.begin ? span.begin : span.end);
    int line_start = begin;
    while (line_start > 0 && src->text[line_start - 1] != '\n')
        line_start--;
    const char *newline = memchr(src->text + begin, '\n', src->len - (size_t)begin);
    int line_end = newline ? (int)(newline - src->text) : (int)src->len;
    if (end > line_end)
        end = line_end;
    int shown_start = line_start, shown_end = line_end;
    if (line_end - line_start > MAX_SHOWN_LINE) {
        shown_start = begin - SHOWN_BEFORE_SPAN > line_start ? begin - SHOWN_BEFORE_SPAN : line_start;
        shown_end = shown_start + MAX_SHOWN_LINE < line_end ? shown_start + MAX_SHOWN_LINE : line_end;
        while (shown_start > line_start && is_continuation((unsigned char)src->text[shown_start]))
            shown_start--; // never start inside a UTF-8 character
    }
    // At most TAB_STOP bytes per source byte, the "..." marks and the NUL.
    size_t room = (size_t)(shown_end - shown_start) * TAB_STOP + 8;
    char *text = xmalloc(room), *mark = xmalloc(room);
    size_t n_text = 0, n_mark = 0;
    if (shown_start > line_start) {
        memcpy(text, "...", 3), memcpy(mark, "   ", 3);
        n_text = n_mark = 3;
    }
    int column = 0;
    for (int i = shown_start; i <= shown_end; i++) {
        bool in_span = i >= begin && (i < end || (i == begin && end == begin));
        if (i == shown_end) { /* the position just past the line, for an empty span at EOL */
            if (in_span && shown_end == line_end)
                mark[n_mark++] = '^';
            break;
        }
        unsigned char c = (unsigned char)src->text[i];
        int width = 1;
        if (c == '\t') {
            width = TAB_STOP - column % TAB_STOP;
            memset(text + n_text, ' ', (size_t)width);
            n_text += (size_t)width;
        } else if (c == '\r' && i + 1 == line_end) {
            width = 0; /* a CRLF line ending */
        } else if (c < 0x20 || c == 0x7F) {
            text[n_text++] = '?';
        } else {
            text[n_text++] = (char)c;
            width = c >= 0x80 && is_continuation(c) ? 0 : 1;
        }
        for (int k = 0; k < width; k++)
            mark[n_mark++] = !in_span ? ' ' : (i == begin && k == 0) ? '^' : '~';
        column += width;
    }
    if (shown_end < line_end)
        memcpy(text + n_text, "...", 3), n_text += 3;
    /* trailing blanks of the underline carry no information */
    while (n_mark > 0 && mark[n_mark - 1] == ' ')
        n_mark--;
    text[n_text] = mark[n_mark] = '\0';
    fprintf(out, "%s\n%s\n", text, n_mark ? mark : "^");
    free(text);
    free(mark);
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
