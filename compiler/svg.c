/* svg.c: what pacic's pictures share (--emit svg's timeline in inspect.c, plot.c's loss
 * curves): the document's frame, indented elements, the palette, escaped text and axis ticks
 * at round numbers. Everything is written into a StrBuf, one element a line. */
#include <math.h>
#include <stdarg.h>
#include <string.h>

#include "pacic.h"

/* Tableau 10, in its own order (enum SvgColor follows it): told apart by most colour-blind
 * readers. */
const char *const svg_colors[SVG_COLORS] = {
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
    "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
};

void svg_open(StrBuf *sb, int width, int height)
{
    emit_line(sb, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
                  "font-family=\"sans-serif\" font-size=\"11\">", width, height);
    sb->indent++;
    emit_line(sb, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>");
}

void svg_close(StrBuf *sb)
{
    sb->indent--;
    emit_line(sb, "</svg>");
}

void svg_element_open(StrBuf *sb, const char *fmt, ...)
{
    va_list ap;
    StrBuf tag = {0};
    va_start(ap, fmt);
    sb_vprintf(&tag, fmt, ap);
    va_end(ap);
    emit_line(sb, "%s", tag.data);
    sb_free(&tag);
    sb->indent++;
}

void svg_element_close(StrBuf *sb, const char *name)
{
    sb->indent--;
    emit_line(sb, "</%s>", name);
}

void svg_escaped(StrBuf *sb, const char *text)
{
    sb_puts(sb, ""); // sb holds a string even where text is empty
    for (const char *c = text; *c; c++) {
        switch (*c) {
        case '&': sb_puts(sb, "&amp;"); break;
        case '<': sb_puts(sb, "&lt;"); break;
        case '>': sb_puts(sb, "&gt;"); break;
        case '"': sb_puts(sb, "&quot;"); break;
        default: sb_printf(sb, "%c", *c);
        }
    }
}

int svg_ticks(double lo, double hi, double *ticks, int max)
{
    double span = hi > lo ? hi - lo : 1.0;
    double unit = pow(10, floor(log10(span / max))), step = unit;
    // the smallest round step (1, 2, 5 or 10 units) that needs at most `max` ticks
    static const double multiples[] = {1, 2, 5, 10};
    for (int i = 0; i < 4; i++) {
        step = unit * multiples[i];
        if (span / step < max)
            break;
    }
    int n = 0;
    for (long k = (long)ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9 && n < max; k++)
        ticks[n++] = k * step;
    return n;
}
