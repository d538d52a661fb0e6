/* plot.c: `pacic plot METRICS.jsonl... -o FILE.svg`: the training and validation losses that
 * `run --metrics` logged (docs/run.md), against optimizer steps and against tokens, a colour
 * per file, and under them the gradient noise scale where the files log it; read with jansson,
 * drawn with svg.c's pieces. */
#include <errno.h>
#include <float.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pacic.h"

static const char plot_usage[] =
    "usage: pacic plot METRICS.jsonl [METRICS.jsonl ...] -o FILE.svg [--label NAME ...]\n"
    "                  [--x steps|tokens|both]\n"
    "Draws the training loss (solid) and validation loss (dashed) of `run --metrics` files,\n"
    "and the gradient noise scale in a panel under them where the files log it.\n"
    "  -o FILE.svg      the picture to write\n"
    "  --label NAME     the legend's name for a file, in order: the first --label names the\n"
    "                   first file (default: the file's path)\n"
    "  --x AXIS         steps, tokens, or both side by side (default both)\n";

/* One logged loss: the optimizer step it was logged at, the tokens trained on by then (every
 * replica's; -1 where the file does not say) and the loss in nats per token. */
typedef struct LossPoint {
    long step;
    double tokens, loss;
} LossPoint;

typedef struct LossCurve {
    LossPoint *items;
    long n, cap;
} LossCurve;

/* One metrics file: its name in the legend and its curves; noise holds the logged noise
 * scales in its `loss`, a null one as NAN (a gap in the line). */
typedef struct PlotRun {
    const char *path, *label;
    LossCurve train, val, noise;
    long untokened_line; /* the first loss record without "tokens" (an older run's), or 0 */
} PlotRun;

typedef enum { X_STEPS, X_TOKENS, X_AXES } XAxis;

typedef struct PlotOptions {
    PlotRun *runs;
    int n_runs, n_labels;
    const char *output;
    bool axis_given;  /* --x was given: an axis the files cannot draw is an error */
    bool draw[X_AXES];
} PlotOptions;

static const char *const x_choices[] = {"steps", "tokens", "both", NULL};

static int plot_usage_error(const char *message, const char *arg)
{
    fprintf(stderr, "pacic: error: plot: ");
    fprintf(stderr, message, arg);
    fprintf(stderr, "\n(pacic plot --help lists the options)\n");
    return EXIT_USER;
}

/* The arguments of `pacic plot` (argv[0] is "plot"). 0, or EXIT_USER with the reason said. */
static int parse_plot_options(int argc, char **argv, PlotOptions *opt)
{
    *opt = (PlotOptions){.runs = xcalloc((size_t)argc, sizeof(PlotRun)), .draw = {true, true}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
        bool takes_value = strcmp(a, "-o") == 0 || strcmp(a, "--label") == 0 || strcmp(a, "--x") == 0;
        if (takes_value && !next)
            return plot_usage_error("%s needs a value", a);
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(plot_usage, stdout);
            exit(0);
        } else if (strcmp(a, "-o") == 0) {
            opt->output = next;
        } else if (strcmp(a, "--label") == 0) {
            opt->runs[opt->n_labels++].label = next;
        } else if (strcmp(a, "--x") == 0) {
            int k = 0;
            while (x_choices[k] && strcmp(next, x_choices[k]) != 0)
                k++;
            if (!x_choices[k])
                return plot_usage_error("--x takes steps, tokens or both, not '%s'", next);
            opt->draw[X_STEPS] = k != X_TOKENS;
            opt->draw[X_TOKENS] = k != X_STEPS;
            opt->axis_given = true;
        } else if (a[0] == '-' && a[1]) {
            return plot_usage_error("unknown option '%s'", a);
        } else {
            opt->runs[opt->n_runs++].path = a;
        }
        i += takes_value;
    }
    if (opt->n_runs == 0)
        return plot_usage_error("%s", "no metrics file given");
    if (!opt->output)
        return plot_usage_error("%s", "no -o FILE.svg: plot needs the picture's name");
    if (opt->n_labels > opt->n_runs)
        return plot_usage_error("more --label than metrics files (%s)", opt->runs[opt->n_runs].label);
    for (int r = 0; r < opt->n_runs; r++)
        if (!opt->runs[r].label)
            opt->runs[r].label = opt->runs[r].path;
    return 0;
}

/* Appends a point. A resumed run appends to its file from its checkpoint on, so a step logged
 * again replaces the earlier record of it and every later one (the run that was cut off). */
static void curve_add(LossCurve *c, LossPoint p)
{
    while (c->n > 0 && c->items[c->n - 1].step >= p.step)
        c->n--;
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->items = xrealloc(c->items, (size_t)c->cap * sizeof(LossPoint));
    }
    c->items[c->n++] = p;
}

static bool record_error(const PlotRun *run, long line, const char *message, const char *detail)
{
    fprintf(stderr, "pacic: error: %s:%ld: %s%s\n", run->path, line, message, detail);
    return false;
}

/* A step record's "noise_scale": a number in (0, 1e30] is a point, null (not estimated yet)
 * a gap; anything else is refused. B_simple > 0 by its definition (run writes null for the
 * rest), and the bound keeps the frame's span, log or linear, finite. */
static bool read_noise_scale(PlotRun *run, long line, const json_t *step, const json_t *tokens,
                             const json_t *noise)
{
    if (!json_is_number(noise) && !json_is_null(noise))
        return record_error(run, line, "\"noise_scale\" is not a number", "");
    double value = json_is_number(noise) ? json_number_value(noise) : NAN;
    if (json_is_number(noise) && !(value > 0 && value <= 1e30)) {
        char detail[80];
        snprintf(detail, sizeof detail, " %g is out of range: it must be in (0, 1e+30]", value);
        return record_error(run, line, "\"noise_scale\"", detail);
    }
    if (!tokens && json_is_number(noise) && !run->untokened_line)
        run->untokened_line = line;
    curve_add(&run->noise, (LossPoint){(long)json_integer_value(step),
                                       tokens ? json_number_value(tokens) : -1, value});
    return true;
}

/* One line of a metrics file: the stage_bytes, post_validation and exchange_bytes_per_step
 * records (skipped), a step's record with "loss",
 * or an evaluation's with "val_loss" (docs/run.md); a null loss (not finite) is no point. */
static bool read_record(PlotRun *run, long line, const char *text, size_t len)
{
    json_error_t error;
    json_t *rec = json_loadb(text, len, 0, &error);
    if (!rec)
        return record_error(run, line, "not a JSON record: ", error.text);
    bool ok = true;
    json_t *step = json_object_get(rec, "step"), *tokens = json_object_get(rec, "tokens");
    json_t *loss = json_object_get(rec, "loss"), *val_loss = json_object_get(rec, "val_loss");
    json_t *value = loss ? loss : val_loss;
    if (json_object_get(rec, "stage_bytes") && !step) {
        // the run's first line: what it allocated, nothing to draw
    } else if ((json_object_get(rec, "post_validation") || json_object_get(rec, "exchange_bytes_per_step")) && !step) {
        // the run's closing records: what post-validation and the replicas' exchange cost
    } else if (!json_is_integer(step) || json_integer_value(step) < 0 || !value) {
        ok = record_error(run, line, "not a record of run --metrics: a step's has an integer \"step\" "
                                     "and \"loss\", an evaluation's \"step\" and \"val_loss\"", "");
    } else if (!json_is_number(value) && !json_is_null(value)) {
        ok = record_error(run, line, loss ? "\"loss\"" : "\"val_loss\"", " is not a number");
    } else if (tokens && !json_is_number(tokens)) {
        ok = record_error(run, line, "\"tokens\" is not a number", "");
    } else if (json_is_number(value) && !(fabs(json_number_value(value)) <= FLT_MAX)) {
        // run writes a float: a larger loss is no run's, and the frame's span would overflow to nan
        char detail[96];
        snprintf(detail, sizeof detail, " %g is out of range: it must be in [-%.9g, %.9g] (a float)",
                 json_number_value(value), FLT_MAX, FLT_MAX);
        ok = record_error(run, line, loss ? "\"loss\"" : "\"val_loss\"", detail);
    } else if (tokens && !(json_number_value(tokens) >= 0 && json_number_value(tokens) <= 1e30)) {
        char detail[80];
        snprintf(detail, sizeof detail, " %g is out of range: it must be in [0, 1e+30]", json_number_value(tokens));
        ok = record_error(run, line, "\"tokens\"", detail);
    } else if (json_is_number(value)) {
        if (!tokens && !run->untokened_line)
            run->untokened_line = line;
        LossPoint p = {(long)json_integer_value(step), tokens ? json_number_value(tokens) : -1,
                       json_number_value(value)};
        curve_add(loss ? &run->train : &run->val, p);
    }
    json_t *noise = json_object_get(rec, "noise_scale");
    if (ok && loss && noise)
        ok = read_noise_scale(run, line, step, tokens, noise);
    json_decref(rec);
    return ok;
}

/* Reads a metrics file into its curves; false with the file (and line) named on stderr. */
static bool load_metrics(PlotRun *run)
{
    char why[200];
    int fd = open_input_file(run->path, METRICS_FILE_LIMIT, why, sizeof why);
    FILE *f = fd < 0 ? NULL : fdopen(fd, "r");
    if (!f) {
        fprintf(stderr, "pacic: error: cannot read %s: %s\n", run->path, fd < 0 ? why : strerror(errno));
        if (fd >= 0)
            close(fd);
        return false;
    }
    char *text = NULL;
    size_t cap = 0;
    ssize_t len;
    long line = 0;
    bool ok = true;
    while (ok && (len = getline(&text, &cap, f)) >= 0) {
        line++;
        if (strspn(text, " \t\r\n") == (size_t)len)
            continue; // a blank line
        ok = read_record(run, line, text, (size_t)len);
    }
    if (ok && ferror(f)) {
        fprintf(stderr, "pacic: error: cannot read %s: %s\n", run->path, strerror(errno));
        ok = false;
    }
    free(text);
    fclose(f);
    if (ok && run->train.n == 0 && run->val.n == 0) {
        fprintf(stderr, "pacic: error: %s: no loss records (run --metrics writes one a step and one "
                        "an evaluation)\n", run->path);
        ok = false;
    }
    return ok;
}

/* ---- drawing ------------------------------------------------------------------------- */

/* The picture: a title, a panel per x axis side by side, the noise scale's panels under them
 * where a file logs it, a legend row per file under all. */
enum { TITLE_H = 36, PANEL_W = 480, PANEL_H = 340, NOISE_H = 240, LEGEND_ROW = 18, TICKS = 7 };
/* Inside a panel: room for the tick labels and axis titles around the plotting area. */
enum { AREA_LEFT = 62, AREA_RIGHT = 16, AREA_TOP = 12, AREA_BOTTOM = 46 };

/* Where a panel's plotting area lies in the picture, and the data range it shows; on a log y
 * axis, y_lo and y_hi are the decimal logarithms of the range's ends. */
typedef struct Frame {
    double left, top, width, height;
    double x_lo, x_hi, y_lo, y_hi;
    bool log_y;
} Frame;

static double frame_x(const Frame *f, double x)
{
    return f->left + f->width * (x - f->x_lo) / (f->x_hi - f->x_lo);
}

static double frame_y(const Frame *f, double y)
{
    if (f->log_y)
        y = log10(y);
    return f->top + f->height * (1 - (y - f->y_lo) / (f->y_hi - f->y_lo));
}

static double point_x(const LossPoint *p, XAxis axis)
{
    return axis == X_TOKENS ? p->tokens : (double)p->step;
}

/* The panel's frame: x from 0 to the largest logged (noise scales' steps included, so that
 * the panel under it shares its x axis), y over every loss with a margin. */
static Frame panel_frame(const PlotOptions *opt, int panel, XAxis axis)
{
    Frame f = {.left = panel * PANEL_W + AREA_LEFT, .top = TITLE_H + AREA_TOP,
               .width = PANEL_W - AREA_LEFT - AREA_RIGHT, .height = PANEL_H - AREA_TOP - AREA_BOTTOM,
               .x_hi = 0, .y_lo = 1e300, .y_hi = -1e300};
    for (int r = 0; r < opt->n_runs; r++) {
        const LossCurve *noise = &opt->runs[r].noise;
        for (long i = 0; i < noise->n; i++)
            if (isfinite(noise->items[i].loss))
                f.x_hi = fmax(f.x_hi, point_x(&noise->items[i], axis));
        for (int k = 0; k < 2; k++) {
            const LossCurve *c = k ? &opt->runs[r].val : &opt->runs[r].train;
            for (long i = 0; i < c->n; i++) {
                f.x_hi = fmax(f.x_hi, point_x(&c->items[i], axis));
                f.y_lo = fmin(f.y_lo, c->items[i].loss);
                f.y_hi = fmax(f.y_hi, c->items[i].loss);
            }
        }
    }
    if (f.x_hi <= 0)
        f.x_hi = 1;
    double margin = f.y_hi > f.y_lo ? 0.04 * (f.y_hi - f.y_lo) : 0.5;
    f.y_lo -= margin;
    f.y_hi += margin;
    return f;
}

/* The noise scale's frame under a loss panel: the same x range; y over every logged noise
 * scale with a margin, on a log axis where they span more than a decade. */
static Frame noise_frame(const PlotOptions *opt, const Frame *above)
{
    Frame f = *above;
    f.top = TITLE_H + PANEL_H + AREA_TOP;
    f.height = NOISE_H - AREA_TOP - AREA_BOTTOM;
    double lo = 1e300, hi = 0;
    for (int r = 0; r < opt->n_runs; r++)
        for (long i = 0; i < opt->runs[r].noise.n; i++)
            if (isfinite(opt->runs[r].noise.items[i].loss)) {
                lo = fmin(lo, opt->runs[r].noise.items[i].loss);
                hi = fmax(hi, opt->runs[r].noise.items[i].loss);
            }
    f.log_y = hi > 10 * lo;
    if (f.log_y) {
        lo = log10(lo);
        hi = log10(hi);
    }
    double margin = hi > lo ? 0.04 * (hi - lo) : 0.1 * hi; // values in (0, 1e30]: lo stays > 0
    f.y_lo = lo - margin;
    f.y_hi = hi + margin;
    return f;
}

/* The y axis's ticks: svg_ticks's round numbers, or on a log axis the decades in the range
 * (every k-th where there are more than TICKS), or 1, 2 and 5 times them where fewer than two
 * decades fall in it. */
static int y_ticks(const Frame *f, double *ticks)
{
    if (!f->log_y)
        return svg_ticks(f->y_lo, f->y_hi, ticks, TICKS);
    int first = (int)ceil(f->y_lo), last = (int)floor(f->y_hi), n = 0;
    if (last - first + 1 >= 2) {
        int every = (last - first + TICKS) / TICKS;
        for (int e = first; e <= last && n < TICKS; e += every)
            ticks[n++] = pow(10, e);
        return n;
    }
    static const double multiples[] = {1, 2, 5};
    for (int e = first - 1; e <= last && n < TICKS; e++)
        for (int m = 0; m < 3 && n < TICKS; m++) {
            double v = multiples[m] * pow(10, e), y = log10(v);
            if (y >= f->y_lo && y <= f->y_hi)
                ticks[n++] = v;
        }
    return n;
}

/* A tick's label: plain, or with k, M, G on the tokens axis. */
static void tick_label(char *buf, size_t size, double value, XAxis axis)
{
    static const struct { double scale; const char *suffix; } units[] = {{1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
    for (int u = 0; axis == X_TOKENS && u < 3; u++)
        if (value >= units[u].scale) {
            snprintf(buf, size, "%g%s", value / units[u].scale, units[u].suffix);
            return;
        }
    snprintf(buf, size, "%g", value);
}

/* The area's box, grid lines and tick labels at round numbers, and the axes' titles. */
static void draw_axes(StrBuf *sb, const Frame *f, XAxis axis, const char *y_title)
{
    double ticks[TICKS], right = f->left + f->width, bottom = f->top + f->height;
    char label[32];
    emit_line(sb, "<rect class=\"area\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
                  "stroke=\"#333\"/>", f->left, f->top, f->width, f->height);
    svg_element_open(sb, "<g class=\"x-ticks\" text-anchor=\"middle\">");
    for (int k = 0, n = svg_ticks(f->x_lo, f->x_hi, ticks, TICKS); k < n; k++) {
        tick_label(label, sizeof label, ticks[k], axis);
        double x = frame_x(f, ticks[k]);
        emit_line(sb, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", x, f->top, x, bottom);
        emit_line(sb, "<text x=\"%.1f\" y=\"%.1f\">%s</text>", x, bottom + 14, label);
    }
    svg_element_close(sb, "g");
    svg_element_open(sb, "<g class=\"y-ticks\" text-anchor=\"end\">");
    for (int k = 0, n = y_ticks(f, ticks); k < n; k++) {
        double y = frame_y(f, ticks[k]);
        emit_line(sb, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>", f->left, y, right, y);
        emit_line(sb, "<text x=\"%.1f\" y=\"%.1f\">%g</text>", f->left - 5, y + 4, ticks[k]);
    }
    svg_element_close(sb, "g");
    emit_line(sb, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>", f->left + f->width / 2,
              bottom + 34, axis == X_TOKENS ? "tokens trained on (every replica's)" : "optimizer step");
    double mid = f->top + f->height / 2, x = f->left - 46;
    emit_line(sb, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">"
                  "%s</text>", x, mid, x, mid, y_title);
}

/* A polyline's points, eight a line, then the end of its start tag; leaves the indent one
 * deeper, for its title. */
static void draw_points(StrBuf *sb, const Frame *f, const LossPoint *points, long n, XAxis axis)
{
    StrBuf text = {0};
    sb->indent += 2;
    for (long i = 0; i < n; i += 8) {
        text.len = 0;
        for (long k = i; k < n && k < i + 8; k++)
            sb_printf(&text, "%s%.1f,%.1f", k > i ? " " : "", frame_x(f, point_x(&points[k], axis)),
                      frame_y(f, points[k].loss));
        emit_line(sb, "%s", text.data);
    }
    sb->indent--;
    emit_line(sb, "\">");
    sb_free(&text);
}

/* One curve as a polyline, eight points a line; the validation curve dashed, a dot a point
 * (its markers, so that a single evaluation shows too). */
static void draw_curve(StrBuf *sb, const Frame *f, int run, const PlotRun *r, bool val, XAxis axis)
{
    const LossCurve *c = val ? &r->val : &r->train;
    if (c->n == 0)
        return;
    char dots[160] = "";
    if (val)
        snprintf(dots, sizeof dots, " stroke-dasharray=\"6 3\" marker-start=\"url(#dot%d)\" "
                 "marker-mid=\"url(#dot%d)\" marker-end=\"url(#dot%d)\"", run, run, run);
    emit_line(sb, "<polyline class=\"%s\" data-run=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\"%s points=\"",
              val ? "val" : "train", run, svg_colors[run % SVG_COLORS], dots);
    draw_points(sb, f, c->items, c->n, axis);
    StrBuf text = {0};
    svg_escaped(&text, r->label);
    emit_line(sb, "<title>%s: %s loss, %ld points</title>", text.data, val ? "validation" : "training", c->n);
    sb->indent--;
    emit_line(sb, "</polyline>");
    sb_free(&text);
}

/* One panel: its axes, then every file's training and validation curves. */
static void draw_panel(StrBuf *sb, const PlotOptions *opt, int panel, XAxis axis)
{
    Frame f = panel_frame(opt, panel, axis);
    svg_element_open(sb, "<g class=\"panel\" data-x=\"%s\">", x_choices[axis]);
    draw_axes(sb, &f, axis, "loss (nats per token)");
    for (int r = 0; r < opt->n_runs; r++) {
        draw_curve(sb, &f, r, &opt->runs[r], false, axis);
        draw_curve(sb, &f, r, &opt->runs[r], true, axis);
    }
    svg_element_close(sb, "g");
}

/* A file's noise scales: a polyline per stretch between nulls (a stretch of one point shows
 * as its dot), in the file's colour, dotted. */
static void draw_noise_curve(StrBuf *sb, const Frame *f, int run, const PlotRun *r, XAxis axis)
{
    const LossCurve *c = &r->noise;
    StrBuf text = {0};
    svg_escaped(&text, r->label);
    for (long i = 0, end; i < c->n; i = end) {
        for (; i < c->n && !isfinite(c->items[i].loss); i++)
            ;
        for (end = i; end < c->n && isfinite(c->items[end].loss); end++)
            ;
        if (end == i)
            break;
        char dot[48] = "";
        if (end - i == 1)
            snprintf(dot, sizeof dot, " marker-start=\"url(#dot%d)\"", run);
        emit_line(sb, "<polyline class=\"noise\" data-run=\"%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" "
                      "stroke-dasharray=\"2 2\"%s points=\"", run, svg_colors[run % SVG_COLORS], dot);
        draw_points(sb, f, &c->items[i], end - i, axis);
        emit_line(sb, "<title>%s: noise scale B_simple, steps %ld to %ld</title>", text.data, c->items[i].step,
                  c->items[end - 1].step);
        sb->indent--;
        emit_line(sb, "</polyline>");
    }
    sb_free(&text);
}

/* The noise scale's panel under a loss panel, on the same x axis. */
static void draw_noise_panel(StrBuf *sb, const PlotOptions *opt, int panel, XAxis axis)
{
    Frame above = panel_frame(opt, panel, axis), f = noise_frame(opt, &above);
    svg_element_open(sb, "<g class=\"noise-panel\" data-x=\"%s\" data-y=\"%s\">", x_choices[axis],
                     f.log_y ? "log" : "linear");
    draw_axes(sb, &f, axis, f.log_y ? "noise scale (sequences, log)" : "noise scale (sequences)");
    for (int r = 0; r < opt->n_runs; r++)
        draw_noise_curve(sb, &f, r, &opt->runs[r], axis);
    svg_element_close(sb, "g");
}

/* The last logged noise scale of a file, or NULL where it logs none. */
static const LossPoint *last_noise(const PlotRun *run)
{
    for (long i = run->noise.n - 1; i >= 0; i--)
        if (isfinite(run->noise.items[i].loss))
            return &run->noise.items[i];
    return NULL;
}

/* A row per file under the panels: its two line styles in its colour, its name, its last
 * losses and noise scale. */
static void draw_legend(StrBuf *sb, const PlotOptions *opt, int top)
{
    svg_element_open(sb, "<g class=\"legend\">");
    StrBuf text = {0};
    for (int r = 0; r < opt->n_runs; r++) {
        const PlotRun *run = &opt->runs[r];
        const char *color = svg_colors[r % SVG_COLORS];
        int y = top + r * LEGEND_ROW;
        emit_line(sb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\"/>", AREA_LEFT,
                  y - 4, AREA_LEFT + 22, y - 4, color);
        emit_line(sb, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"%s\" stroke-width=\"2\" "
                      "stroke-dasharray=\"6 3\"/>", AREA_LEFT + 28, y - 4, AREA_LEFT + 50, y - 4, color);
        text.len = 0;
        svg_escaped(&text, run->label);
        if (run->train.n)
            sb_printf(&text, "  (training %.4f at step %ld", run->train.items[run->train.n - 1].loss,
                      run->train.items[run->train.n - 1].step);
        if (run->val.n)
            sb_printf(&text, "%svalidation %.4f at step %ld", run->train.n ? ", " : "  (",
                      run->val.items[run->val.n - 1].loss, run->val.items[run->val.n - 1].step);
        const LossPoint *noise = last_noise(run);
        if (noise)
            sb_printf(&text, "%snoise scale %.4g at step %ld", run->train.n || run->val.n ? ", " : "  (",
                      noise->loss, noise->step);
        emit_line(sb, "<text class=\"label\" x=\"%d\" y=\"%d\">%s)</text>", AREA_LEFT + 58, y, text.data);
    }
    sb_free(&text);
    svg_element_close(sb, "g");
}

/* The whole picture into sb. */
static void draw_plot(StrBuf *sb, const PlotOptions *opt)
{
    int panels = opt->draw[X_STEPS] + opt->draw[X_TOKENS];
    bool noise = false;
    for (int r = 0; r < opt->n_runs; r++)
        noise |= last_noise(&opt->runs[r]) != NULL;
    int legend_top = TITLE_H + PANEL_H + (noise ? NOISE_H : 0) + LEGEND_ROW;
    svg_open(sb, panels * PANEL_W, legend_top + opt->n_runs * LEGEND_ROW);
    emit_line(sb, "<text x=\"%d\" y=\"24\" font-size=\"15\">Training loss (solid) and validation loss "
                  "(dashed, a dot an evaluation)%s</text>", AREA_LEFT,
              noise ? "; under them the noise scale B_simple (dotted)" : "");
    svg_element_open(sb, "<defs>");
    for (int r = 0; r < opt->n_runs; r++)
        emit_line(sb, "<marker id=\"dot%d\" viewBox=\"0 0 6 6\" refX=\"3\" refY=\"3\" markerWidth=\"6\" "
                      "markerHeight=\"6\" markerUnits=\"userSpaceOnUse\"><circle cx=\"3\" cy=\"3\" r=\"3\" "
                      "fill=\"%s\"/></marker>", r, svg_colors[r % SVG_COLORS]);
    svg_element_close(sb, "defs");
    for (int axis = 0, panel = 0; axis < X_AXES; axis++)
        if (opt->draw[axis])
            draw_panel(sb, opt, panel++, (XAxis)axis);
    for (int axis = 0, panel = 0; noise && axis < X_AXES; axis++)
        if (opt->draw[axis])
            draw_noise_panel(sb, opt, panel++, (XAxis)axis);
    draw_legend(sb, opt, legend_top);
    svg_close(sb);
}

/* Against tokens, every file must say them: an error where --x asked for it, else the panel
 * is left out with a note. */
static bool check_tokens(PlotOptions *opt)
{
    for (int r = 0; r < opt->n_runs && opt->draw[X_TOKENS]; r++) {
        const PlotRun *run = &opt->runs[r];
        if (!run->untokened_line)
            continue;
        fprintf(stderr, "pacic: %s: %s:%ld: a loss without \"tokens\" (a run from before they were "
                        "logged)%s\n", opt->axis_given ? "error" : "note", run->path, run->untokened_line,
                opt->axis_given ? "; plot it with --x steps" : ": drawn against steps only");
        if (opt->axis_given)
            return false;
        opt->draw[X_TOKENS] = false;
    }
    return true;
}

int plot_main(int argc, char **argv)
{
    PlotOptions opt;
    int status = parse_plot_options(argc, argv, &opt);
    for (int r = 0; r < opt.n_runs && status == 0; r++)
        if (!load_metrics(&opt.runs[r]))
            status = EXIT_USER;
    if (status == 0 && !check_tokens(&opt))
        status = EXIT_USER;
    if (status == 0) {
        StrBuf sb = {0};
        draw_plot(&sb, &opt);
        if (write_file_atomic(opt.output, sb.data, sb.len) != 0) {
            fprintf(stderr, "pacic: error: cannot write %s: %s\n", opt.output, strerror(errno));
            status = EXIT_USER;
        }
        sb_free(&sb);
    }
    for (int r = 0; r < opt.n_runs; r++) {
        free(opt.runs[r].train.items);
        free(opt.runs[r].val.items);
        free(opt.runs[r].noise.items);
    }
    free(opt.runs);
    return status;
}
