/* main.c: the pacic command line. Runs the phases in order; each phase's output is the
 * next one's only input. */
#include <errno.h>
#include <ftw.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pacic.h"

typedef enum { MODE_BUILD, MODE_CHECK, MODE_EXPLAIN, MODE_EMIT } Mode;

#define EMIT_KINDS(X)                                                                    \
    X(SCHEDULE, "schedule", "per-stage instruction listing")                              \
    X(TIMELINE, "timeline", "the pipeline over time, in the terminal")                    \
    X(SVG, "svg", "the same as a picture")                                                \
    X(TRACE, "trace", "Chrome trace JSON (opens in Perfetto)")                            \
    X(COSTS, "costs", "the GPU cost model per op (with --profile: measured beside)")      \
    X(C, "c", "generated C sources, into the folder -o names")

typedef enum {
#define EMIT_ENUM(name, text, help) EMIT_##name,
    EMIT_KINDS(EMIT_ENUM)
#undef EMIT_ENUM
} EmitKind;

static const char *const emit_names[] = {
#define EMIT_NAME(name, text, help) text,
    EMIT_KINDS(EMIT_NAME)
#undef EMIT_NAME
    NULL,
};

static const char *const dump_names[] = {"tokens", "ast", "config", "plan", NULL};

enum { EXPLAIN_SIM_STEPS = 32 };

typedef struct Options {
    const char *input;
    const char *output;
    const char *keep_dir;
    const char *profile;
    const char *balance;  /* a profile whose measured costs choose the split */
    const char *dump;
    Mode mode;
    EmitKind emit;
    long steps_override;  /* 0: as the file says */
    long show_steps;      /* steps drawn by timeline, svg and trace */
    bool fill_drain;      /* draw a separate run of show_steps steps, its fill and drain included */
} Options;

static void usage(FILE *out)
{
    fprintf(out,
            "usage: pacic FILE.paci [options]\n"
            "       pacic tokenize [--bpe DIR] TEXT... PREFIX [--val-fraction F] [--threads N]\n"
            "       pacic tokenize --bpe DIR --decode TOKENS.bin\n"
            "       pacic plot METRICS.jsonl [METRICS.jsonl ...] -o FILE.svg [--label NAME ...]\n"
            "                  [--x steps|tokens|both]\n"
            "       pacic calibrate-cpu [-o FILE]   measure this machine's CPU for the cost model\n"
            "\n"
            "Compiles a pipeline-parallel GPT training description into an executable.\n"
            "`pacic tokenize` makes token files of a text; `pacic plot` draws the loss curves of\n"
            "`run --metrics` files (pacic plot --help; docs/run.md).\n"
            "\n"
            "  -o PATH          the executable to build (default: run), or the file --emit\n"
            "                   writes (default: standard output; a folder for --emit c)\n"
            "  --check          parse and check only\n"
            "  --explain        the machine it prices on, stages, memory, drift bound,\n"
            "                   predicted throughput and bubble, every schedule side by\n"
            "                   side, and the cost model op by op\n"
            "  --emit KIND      one of:\n");
#define EMIT_HELP(name, text, help) fprintf(out, "                     %-9s %s\n", text, help);
    EMIT_KINDS(EMIT_HELP)
#undef EMIT_HELP
    fprintf(out,
            "  --steps N        override the number of training steps\n"
            "  --show-steps N   optimizer steps drawn by timeline, svg (default 3): steady-\n"
            "                   state steps of the file's run, as --explain prices it;\n"
            "                   trace: the run's first N steps\n"
            "  --fill-drain     draw instead a run of just those N steps, from its fill to\n"
            "                   its drain\n"
            "  --profile FILE   measured costs for the cost model (run --profile-out); with\n"
            "                   --explain, also the most expensive ops of each stage\n"
            "  --balance FILE   split the layers by the costs measured in FILE (run\n"
            "                   --profile-out) instead of the cost model's; a `split` in\n"
            "                   the file still wins\n"
            "  --keep DIR       keep the generated sources of the build in DIR\n"
            "  --dump KIND      print an intermediate form: tokens, ast, config, plan\n"
            "  --version        print the version\n");
}

static NORETURN void usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "pacic: error: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n(pacic --help lists the options)\n");
    exit(EXIT_USER);
}

static int index_of(const char *word, const char *const *names)
{
    for (int i = 0; names[i]; i++)
        if (strcmp(word, names[i]) == 0)
            return i;
    return -1;
}

/* A choice flag's value must be one of names; say the closest if it is not. */
static int parse_choice(const char *flag, const char *value, const char *const *names)
{
    int i = index_of(value, names);
    if (i >= 0)
        return i;
    const char *guess = did_you_mean(value, names);
    fprintf(stderr, "pacic: error: unknown %s '%s'", flag, value);
    if (guess)
        fprintf(stderr, "; did you mean '%s'?", guess);
    fprintf(stderr, "\n(choices:");
    for (int j = 0; names[j]; j++)
        fprintf(stderr, " %s", names[j]);
    fprintf(stderr, ")\n");
    exit(EXIT_USER);
}

static long parse_count(const char *flag, const char *value)
{
    char *end;
    errno = 0;
    long n = strtol(value, &end, 10);
    if (errno || *end || n < 1 || n > 1000000000L) {
        fprintf(stderr, "pacic: error: %s expects a positive integer, got '%s'\n", flag, value);
        exit(EXIT_USER);
    }
    return n;
}

static void parse_options(int argc, char **argv, Options *opt)
{
    *opt = (Options){.mode = MODE_BUILD, .show_steps = 3};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *next = i + 1 < argc ? argv[i + 1] : NULL;
#define NEED_VALUE()                                                                     \
    do {                                                                                 \
        if (!next)                                                                       \
            usage_error("%s needs a value", a);                                          \
        i++;                                                                             \
    } while (0)
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            exit(0);
        } else if (strcmp(a, "--version") == 0) {
            printf("pacic %s\n", PACIC_VERSION);
            exit(0);
        } else if (strcmp(a, "-o") == 0) {
            NEED_VALUE();
            opt->output = next;
        } else if (strcmp(a, "--check") == 0) {
            opt->mode = MODE_CHECK;
        } else if (strcmp(a, "--explain") == 0) {
            opt->mode = MODE_EXPLAIN;
        } else if (strcmp(a, "--emit") == 0) {
            NEED_VALUE();
            opt->mode = MODE_EMIT;
            opt->emit = (EmitKind)parse_choice("--emit kind", next, emit_names);
        } else if (strcmp(a, "--steps") == 0) {
            NEED_VALUE();
            opt->steps_override = parse_count(a, next);
        } else if (strcmp(a, "--show-steps") == 0) {
            NEED_VALUE();
            opt->show_steps = parse_count(a, next);
        } else if (strcmp(a, "--fill-drain") == 0) {
            opt->fill_drain = true;
        } else if (strcmp(a, "--profile") == 0) {
            NEED_VALUE();
            opt->profile = next;
        } else if (strcmp(a, "--balance") == 0) {
            NEED_VALUE();
            opt->balance = next;
        } else if (strcmp(a, "--keep") == 0) {
            NEED_VALUE();
            opt->keep_dir = next;
        } else if (strcmp(a, "--dump") == 0) {
            NEED_VALUE();
            opt->dump = dump_names[parse_choice("--dump kind", next, dump_names)];
        } else if (a[0] == '-' && a[1]) {
            usage_error("unknown option '%s'", a);
        } else if (!opt->input) {
            opt->input = a;
        } else {
            usage_error("more than one input file ('%s')", a);
        }
#undef NEED_VALUE
    }
    if (!opt->input)
        usage_error("%s", "no input file");
    if (opt->mode == MODE_EMIT && opt->emit == EMIT_C && !opt->output)
        usage_error("%s", "--emit c needs -o DIR");
}

/* Output of an --emit kind: -o FILE, or standard output. */
static FILE *open_output(const char *path)
{
    if (!path)
        return stdout;
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "pacic: error: cannot write %s: %s\n", path, strerror(errno));
        exit(EXIT_USER);
    }
    return f;
}

static void close_output(FILE *f, const char *path)
{
    if (f == stdout) {
        fflush(f);
        return;
    }
    if (fclose(f) != 0) {
        fprintf(stderr, "pacic: error: cannot write %s: %s\n", path, strerror(errno));
        exit(EXIT_USER);
    }
}

static int make_dir(const char *path)
{
    if (mkdir(path, 0755) == 0 || errno == EEXIST)
        return 0;
    fprintf(stderr, "pacic: error: cannot create folder %s: %s\n", path, strerror(errno));
    return -1;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    return remove(path);
}

/* The executable can be written at OUT (its folder exists and takes files, OUT is no folder):
 * checked before anything is generated, so a mistyped -o costs no compile. */
static bool writable_output(const char *out)
{
    char *copy = xstrdup(out);
    const char *folder = dirname(copy);
    struct stat st;
    bool ok = false;
    if (stat(folder, &st) != 0)
        fprintf(stderr, "pacic: error: cannot write %s: no folder %s (%s)\n", out, folder, strerror(errno));
    else if (!S_ISDIR(st.st_mode))
        fprintf(stderr, "pacic: error: cannot write %s: %s is not a folder\n", out, folder);
    else if (access(folder, W_OK | X_OK) != 0)
        fprintf(stderr, "pacic: error: cannot write %s: folder %s: %s\n", out, folder, strerror(errno));
    else if (stat(out, &st) == 0 && S_ISDIR(st.st_mode))
        fprintf(stderr, "pacic: error: cannot write %s: it is a folder (-o names the executable)\n", out);
    else
        ok = true;
    free(copy);
    return ok;
}

/* Generates the sources into --keep DIR or a temporary folder and links the executable. */
static int build(const char *argv0, const Options *opt, const Config *cfg, const Lowered *low,
                 const paci_table *table)
{
    const char *out = opt->output ? opt->output : "run";
    if (!writable_output(out))
        return EXIT_USER;
    const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *tmp_template = xasprintf("%s/pacic-XXXXXX", tmpdir);
    const char *dir = opt->keep_dir;
    int status = 0;
    if (dir) {
        if (make_dir(dir) != 0)
            status = EXIT_USER;
    } else if (!(dir = mkdtemp(tmp_template))) {
        fprintf(stderr, "pacic: error: cannot create a temporary folder in %s (TMPDIR): %s\n", tmpdir,
                strerror(errno));
        status = EXIT_USER; /* TMPDIR names no writable folder */
    }
    if (status == 0 && !codegen_write(cfg, low, table, dir))
        status = EXIT_INTERNAL;
    /* A C compiler failure on the sources exits in build_executable and keeps them, saying
     * where; the other failures (no runtime, no compiler, an unwritable output) are not
     * about them. */
    if (status == 0 && !build_executable(argv0, dir, out))
        status = EXIT_INTERNAL;
    if (dir && !opt->keep_dir)
        nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(tmp_template);
    if (status != 0)
        return status;
    if (opt->keep_dir)
        fprintf(stderr, "pacic: generated sources kept in %s\n", opt->keep_dir);
    return 0;
}

/* The costs every prediction of one pacic call uses, and their name: a profile's measured
 * ones (--profile, or --balance's per part of the model), else the cost model op by op on the
 * machine the file names (machine.c). 0, or EXIT_USER on a bad profile. */
static int inspect_costs(const Options *opt, const Config *cfg, const Plan *plan, const GpuCosts *costs,
                         CostModel *cm, OpProfile *op_profile, char *model, size_t model_size)
{
    if (opt->profile) {
        cost_model_from_plan(cfg, plan, cm);
        if (!profile_load(opt->profile, plan, cm, op_profile))
            return EXIT_USER;
        cost_model_allreduce(cfg, plan, cm); /* hidden behind the backward measured */
        snprintf(model, model_size, "costs measured in %s", opt->profile);
    } else if (cfg->measured) {
        cost_model_from_plan(cfg, plan, cm);
        snprintf(model, model_size, "compute costs measured (--balance)");
    } else {
        cost_model_from_gpu_costs(cfg, plan, costs, cm);
        snprintf(model, model_size, "%s cost model", cfg->machine == MACHINE_CPU ? "CPU" : "GPU");
    }
    return 0;
}

/* --explain and the --emit forms that predict: one simulation of the file's own run, priced by
 * inspect_costs, that every view reads (--explain's figures, the timeline's and the picture's
 * steady-state steps, the trace); --fill-drain draws a run of --show-steps steps instead. */
static int inspect(const char *argv0, const Options *opt, Config *cfg, const Plan *plan, const paci_table *table,
                   const VerifyReport *report, const Lowered *lowered)
{
    bool explain = opt->mode == MODE_EXPLAIN || opt->emit == EMIT_COSTS;
    bool model_costs = explain || (!opt->profile && !cfg->measured);
    GpuCosts costs = {0};
    if (model_costs) {
        machine_cpu_resolve(cfg, argv0); /* a CPU nobody measured yet is measured now */
        gpu_costs_build(cfg, lowered, &costs);
    }
    CostModel cm;
    OpProfile op_profile = {0};
    char model[1100];
    if (inspect_costs(opt, cfg, plan, &costs, &cm, &op_profile, model, sizeof model) != 0) {
        gpu_costs_free(&costs);
        return EXIT_USER;
    }
    /* Enough steps for the steady state to dominate, and for the steps drawn to lie in it. */
    long steps = opt->show_steps * 2 > EXPLAIN_SIM_STEPS && !explain ? opt->show_steps * 2 : EXPLAIN_SIM_STEPS;
    if (steps > cfg->steps)
        steps = cfg->steps;
    if (opt->fill_drain || opt->emit == EMIT_TRACE) // the trace replays a run: its first N steps
        steps = opt->show_steps < cfg->steps ? opt->show_steps : cfg->steps;
    SimResult sim;
    simulate(cfg, table, &cm, steps, &sim);
    SimView view = sim_view(cfg, &sim, model, opt->fill_drain ? 0 : opt->show_steps);
    view.cm = opt->profile || cfg->measured ? &cm : NULL;
    FILE *out = open_output(opt->output);
    GpuPrediction predicted = {0};
    if (explain) // the cost model's own prediction, over --explain's steps
        predicted = gpu_costs_predict(cfg, plan, table, &costs,
                                      cfg->steps < EXPLAIN_SIM_STEPS ? cfg->steps : EXPLAIN_SIM_STEPS);
    if (opt->mode == MODE_EXPLAIN) {
        inspect_explain(out, cfg, plan, table, report, &view);
        gpu_costs_explain(out, cfg, plan, &costs, &predicted, model_costs && !opt->profile && !cfg->measured);
        inspect_op_profile(out, plan, &op_profile, opt->profile);
    } else if (opt->emit == EMIT_COSTS)
        gpu_costs_emit(out, cfg, &costs, &predicted, opt->profile ? &op_profile : NULL);
    else if (opt->emit == EMIT_SCHEDULE)
        inspect_listing(out, cfg, table);
    else if (opt->emit == EMIT_TIMELINE)
        inspect_timeline(out, cfg, &view);
    else if (opt->emit == EMIT_SVG)
        inspect_svg(out, cfg, &view);
    else if (opt->emit == EMIT_TRACE)
        inspect_trace(out, cfg, &sim);
    else
        unreachable();
    close_output(out, opt->output);
    gpu_costs_free(&costs);
    sim_result_free(&sim);
    op_profile_free(&op_profile);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "tokenize") == 0)
        return tokenize_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "plot") == 0)
        return plot_main(argc - 1, argv + 1);
    if (argc > 1 && strcmp(argv[1], "calibrate-cpu") == 0)
        return calibrate_main(argc - 1, argv + 1, argv[0]);

    Options opt;
    parse_options(argc, argv, &opt);

    size_t len;
    char why[200];
    char *text = read_input_file(opt.input, DSL_FILE_LIMIT, &len, why, sizeof why);
    if (!text) {
        fprintf(stderr, "pacic: error: cannot read %s: %s\n", opt.input, why);
        return EXIT_USER;
    }
    if (strlen(text) != len) {
        fprintf(stderr, "pacic: error: %s: not a text file (NUL byte at offset %zu)\n", opt.input,
                strlen(text));
        return EXIT_USER;
    }
    Source src = {.path = opt.input, .text = text, .len = len};

    if (opt.dump && strcmp(opt.dump, "tokens") == 0) {
        lex_dump(stdout, &src);
        return diag_error_count() ? EXIT_USER : 0;
    }
    Ast *ast = parse_source(&src);
    if (!ast)
        return EXIT_USER;
    if (opt.dump && strcmp(opt.dump, "ast") == 0) {
        ast_dump(stdout, &src, ast);
        return 0;
    }

    Config cfg;
    bool need_data = opt.mode == MODE_BUILD || (opt.mode == MODE_EMIT && opt.emit == EMIT_C);
    if (!sema_check(&src, ast, need_data, &cfg))
        return EXIT_USER;
    if (opt.steps_override)
        cfg.steps = opt.steps_override;
    if (opt.mode == MODE_CHECK)
        return 0;
    if (opt.dump && strcmp(opt.dump, "config") == 0) {
        config_dump(stdout, &cfg);
        return 0;
    }

    Plan plan;
    MeasuredCosts measured;
    if (opt.balance) {
        if (opt.profile) {
            diag_plain(DIAG_ERROR, "--balance and --profile both set the stages' costs: give one");
            return EXIT_USER;
        }
        /* the model's plan only numbers the stages for the reader; the split comes after */
        plan_layout(&cfg, &plan);
        if (!measured_costs_load(opt.balance, &plan, &measured))
            return EXIT_USER;
        cfg.measured = &measured;
    }
    if (!plan_build(&cfg, &plan))
        return EXIT_USER;
    if (opt.dump && strcmp(opt.dump, "plan") == 0) {
        plan_dump(stdout, &cfg, &plan);
        return 0;
    }

    paci_table *table = schedule_build(&cfg, &plan);
    VerifyReport report;
    if (!verify_schedule(table, &plan, &report))
        ICE("the %s schedule failed verification: %s", paci_schedule_name(cfg.schedule),
            report.error);
    for (int s = 0; s < cfg.stages; s++) // the static delays `delay_correction nesterov` reads
        cfg.stage_delay[s] = report.max_drift[s];

    int status = 0;
    /* The GPU path is generated when NVRTC loads and the runtime was built with CUDA. */
    cfg.cuda = (opt.mode == MODE_BUILD || opt.mode == MODE_EMIT) && cuda_nvrtc_available() &&
               runtime_has_cuda(argv[0]);
    Lowered lowered;
    lower_build(&cfg, &plan, &lowered);
    if (opt.mode == MODE_BUILD || (opt.mode == MODE_EMIT && opt.emit == EMIT_C)) {
        if (opt.mode == MODE_EMIT) {
            if (make_dir(opt.output) != 0)
                return EXIT_USER;
            status = codegen_write(&cfg, &lowered, table, opt.output) ? 0 : EXIT_INTERNAL;
        } else {
            status = build(argv[0], &opt, &cfg, &lowered, table);
        }
    } else {
        status = inspect(argv[0], &opt, &cfg, &plan, table, &report, &lowered);
    }
    lower_free(&lowered);
    schedule_free(table);
    config_free(&cfg);
    ast_free(ast);
    free(text);
    return status;
}
