/* test_sema.c: the front end from text to Config: tokens, syntax errors and their
 * recovery, every semantic check with its exact message and position, derived values. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pacic.h"
#include "pacirt.h"

/* A valid file, split so that tests can replace one block. */
#define MODEL "model gpt2 { layers 4; width 128; heads 4; context 64; vocab 256 }\n"
#define PIPELINE "pipeline { stages 4; schedule paci; window 4 }\n"
#define BATCH "batch { micro 8 }\n"
#define TRAIN "train { steps 1000 }\n"

/* The outcome of checking one text: diagnostics as printed, the Config, success. */
typedef struct Checked {
    char *messages;
    Config cfg;
    bool ok;
    bool parsed;
} Checked;

static Checked check_as(const char *path, const char *text, bool need_data)
{
    Checked c = {0};
    size_t size = 0;
    FILE *stream = open_memstream(&c.messages, &size);
    diag_set_stream(stream);
    diag_reset();
    Source src = {path, text, strlen(text)};
    Ast *ast = parse_source(&src);
    c.parsed = ast != NULL;
    if (ast) {
        c.ok = sema_check(&src, ast, need_data, &c.cfg);
        ast_free(ast);
    }
    diag_set_stream(NULL);
    fclose(stream);
    c.cfg.src = NULL; /* the Source lived on this frame */
    return c;
}

static Checked check(const char *text)
{
    return check_as("t.paci", text, false);
}

static void done(Checked *c)
{
    free(c->messages);
    if (c->parsed)
        config_free(&c->cfg);
}

/* The first line of the diagnostics, for tests about one message. */
static char *first_line(const Checked *c)
{
    const char *nl = strchr(c->messages, '\n');
    return xasprintf("%.*s", nl ? (int)(nl - c->messages) : (int)strlen(c->messages), c->messages);
}

static void assert_first_message(const char *text, const char *expected)
{
    Checked c = check(text);
    assert_false(c.ok);
    char *line = first_line(&c);
    assert_string_equal(line, expected);
    free(line);
    done(&c);
}

/* ---- valid files and derived values ---------------------------------------------------- */

static void test_valid_file_fills_config(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH TRAIN);
    assert_true(c.ok);
    assert_string_equal(c.messages, "");
    assert_int_equal(c.cfg.layers, 4);
    assert_int_equal(c.cfg.width, 128);
    assert_int_equal(c.cfg.heads, 4);
    assert_int_equal(c.cfg.context, 64);
    assert_int_equal(c.cfg.vocab, 256);
    assert_int_equal(c.cfg.stages, 4);
    assert_int_equal(c.cfg.schedule, PACI_SCHED_PACI);
    assert_int_equal(c.cfg.window, 4);
    assert_int_equal(c.cfg.micro, 8);
    assert_int_equal(c.cfg.global_batch, 32);
    assert_int_equal(c.cfg.steps, 1000);
    assert_null(c.cfg.split_units);
    done(&c);
}

static void test_defaults(void **state)
{
    (void)state;
    Checked c = check("model gpt2-small {}\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.layers, 12);
    assert_int_equal(c.cfg.width, 768);
    assert_int_equal(c.cfg.heads, 12);
    assert_int_equal(c.cfg.context, 1024);
    assert_int_equal(c.cfg.vocab, 50257);
    assert_int_equal(c.cfg.stages, 1);
    assert_int_equal(c.cfg.window, 1); /* window defaults to stages */
    assert_int_equal(c.cfg.schedule, PACI_SCHED_PACI);
    assert_true(c.cfg.lr == 3e-4);
    assert_int_equal(c.cfg.lr_scale, LR_SCALE_NONE);
    assert_true(c.cfg.beta1 == 0.9 && c.cfg.beta2 == 0.95);
    assert_true(c.cfg.eps == 1e-8 && c.cfg.weight_decay == 0.1 && c.cfg.grad_clip == 1.0);
    assert_int_equal(c.cfg.warmup_steps, 10); /* 1% of 1000 */
    assert_int_equal(c.cfg.lr_decay, PR_DECAY_COSINE);
    assert_true(c.cfg.min_lr_ratio == 0.1);
    assert_int_equal(c.cfg.eval_every, 0);
    assert_int_equal(c.cfg.eval_batches, 8);
    assert_int_equal(c.cfg.ckpt_every, 0);
    assert_int_equal(c.cfg.ckpt_keep, 2); /* the new checkpoint and the one before it */
    assert_string_equal(c.cfg.ckpt_dir, "checkpoints");
    assert_int_equal(c.cfg.seed, 1337);
    assert_int_equal(c.cfg.precision, PREC_FP32);
    assert_int_equal(c.cfg.on_nan, PR_ON_NAN_STOP);
    assert_int_equal(c.cfg.attention, ATTN_FLASH);
    assert_false(c.cfg.tied);
    /* no hardware block: this machine's CPU, its partitioner's nominal rates */
    assert_int_equal(c.cfg.machine, MACHINE_CPU);
    assert_non_null(c.cfg.cpu);
    assert_true(c.cfg.cpu->vector_flops > 0 && c.cfg.cpu->n_gemm > 0);
    assert_true(c.cfg.device_memory > 0);
    done(&c);
    /* `hardware {}` and `hardware gpu {}`: an H100 SXM's */
    static const char *const gpu_files[] = {MODEL BATCH TRAIN "hardware {}\n", MODEL BATCH TRAIN "hardware gpu {}\n"};
    for (int named = 0; named < 2; named++) {
        c = check(gpu_files[named]);
        assert_true(c.ok);
        assert_int_equal(c.cfg.machine, MACHINE_GPU);
        assert_true(c.cfg.device_flops == 494e12);
        assert_true(c.cfg.link_bandwidth == 450e9);
        assert_true(c.cfg.link_latency == 5e-6);
        assert_true(c.cfg.device_memory == 80e9);
        done(&c);
    }
}

/* `hardware cpu { ... }`: the rates written win over the calibration's; GPU blocks take no CPU key. */
static void test_hardware_cpu(void **state)
{
    (void)state;
    Checked c = check(MODEL BATCH TRAIN "hardware cpu { cores 3; flops 2e10; vector_flops 3e9; latency 0 }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.machine, MACHINE_CPU);
    assert_int_equal(c.cfg.cpu->cores, 3);
    assert_true(c.cfg.cpu->n_gemm == 1 && c.cfg.cpu->gemm_flops[0] == 2e10);
    assert_true(c.cfg.cpu->vector_flops == 3e9 && c.cfg.cpu->latency == 0);
    assert_true(c.cfg.device_flops == 2e10); /* the partitioner's */
    done(&c);
    c = check(MODEL BATCH TRAIN "hardware gpu { cores 3 }\n");
    assert_false(c.ok);
    done(&c);
    c = check(MODEL BATCH TRAIN "hardware cpu { calibration \"/nonexistent/cpu.txt\" }\n");
    assert_false(c.ok);
    done(&c);
}

static void test_presets_and_overrides(void **state)
{
    (void)state;
    Checked c = check("model gpt2-medium { context 512 }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.layers, 24);
    assert_int_equal(c.cfg.width, 1024);
    assert_int_equal(c.cfg.heads, 16);
    assert_int_equal(c.cfg.context, 512);
    done(&c);
    c = check("model gpt2-xl { layers 2 }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.layers, 2);
    assert_int_equal(c.cfg.width, 1600);
    assert_int_equal(c.cfg.heads, 25);
    done(&c);
}

static void test_numbers_with_underscores_and_exponents(void **state)
{
    (void)state;
    Checked c = check(MODEL BATCH "train { steps 1_000_000; seed 42\n optimizer adamw { lr 6e-4; eps 1.5e-9 } }\n"
                      "hardware { flops 1.5e15; memory 40e9 }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.steps, 1000000);
    assert_int_equal(c.cfg.seed, 42);
    assert_true(c.cfg.lr == 6e-4);
    assert_true(c.cfg.eps == 1.5e-9);
    assert_true(c.cfg.device_flops == 1.5e15);
    assert_true(c.cfg.device_memory == 40e9);
    done(&c);
}

static void test_lr_scale_rules(void **state)
{
    (void)state;
    /* global batch 16 x 8 = 128, lr stated at 256 */
    Checked c = check(MODEL "pipeline { stages 4; window 8 }\nbatch { micro 16 }\n"
                      "train { steps 10; optimizer adamw { lr 3e-4 at 256 scale sqrt } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.global_batch, 128);
    assert_int_equal(c.cfg.lr_base_batch, 256);
    assert_int_equal(c.cfg.lr_scale, LR_SCALE_SQRT);
    assert_true(fabs(c.cfg.lr - 3e-4 * sqrt(0.5)) < 1e-15);
    done(&c);
    c = check(MODEL "pipeline { stages 4; window 8 }\nbatch { micro 16 }\n"
              "train { steps 10; optimizer adamw { lr 3e-4 at 64 scale linear } }\n");
    assert_true(c.ok);
    assert_true(fabs(c.cfg.lr - 6e-4) < 1e-15);
    done(&c);
    /* `at` without `scale` means sqrt */
    c = check(MODEL "pipeline { stages 4; window 8 }\nbatch { micro 16 }\n"
              "train { steps 10; optimizer adamw { lr 1e-3 at 512 } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.lr_scale, LR_SCALE_SQRT);
    assert_true(fabs(c.cfg.lr - 0.5e-3) < 1e-15);
    done(&c);
    c = check(MODEL "pipeline { stages 4; window 8 }\nbatch { micro 16 }\n"
              "train { steps 10; optimizer adamw { lr 1e-3 at 512 scale none } }\n");
    assert_true(c.ok);
    assert_true(c.cfg.lr == 1e-3);
    done(&c);
}

static void test_warmup_percentage_rounds_and_keeps_one(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 2_000; lr_schedule { warmup 2% } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.warmup_steps, 40);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 30; lr_schedule { warmup 1% } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.warmup_steps, 1); /* 0.3 rounds to 0, but a non-zero warmup keeps 1 */
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 30; lr_schedule { warmup 0% } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.warmup_steps, 0);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 1000; lr_schedule { warmup 125; decay linear; floor 0 } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.warmup_steps, 125);
    assert_int_equal(c.cfg.lr_decay, PR_DECAY_LINEAR);
    assert_true(c.cfg.min_lr_ratio == 0);
    done(&c);
}

static void test_global_sets_window(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4 }\nbatch { micro 8; global 64 }\n" TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.window, 8);
    assert_int_equal(c.cfg.global_batch, 64);
    done(&c);
}

static void test_bf16_flops_and_precision(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; precision bf16 }\nhardware gpu {}\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.precision, PREC_BF16);
    assert_true(c.cfg.device_flops == 989e12);
    done(&c);
}

/* on_nan skip sets the runtime's enum; any other word is an error listing the two. */
static void test_on_nan(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; on_nan skip }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.on_nan, PR_ON_NAN_SKIP);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 5; on_nan ignore }\n");
    assert_false(c.ok);
    done(&c);
}

/* attention chooses the form of the attention kernels; an unknown word is an error. */
static void test_attention(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; attention matmul }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.attention, ATTN_MATMUL);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 5; attention stored }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.attention, ATTN_STORED);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 5; attention sdpa }\n");
    assert_false(c.ok);
    done(&c);
}

static void test_schedules_by_name(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int kind;
    } cases[] = {{"gpipe", PACI_SCHED_GPIPE}, {"1f1b", PACI_SCHED_ONEF1B},
                 {"pipedream", PACI_SCHED_PIPEDREAM}, {"paci", PACI_SCHED_PACI}};
    for (size_t i = 0; i < 4; i++) {
        char *text = xasprintf(MODEL "pipeline { stages 2; schedule %s }\n" BATCH TRAIN, cases[i].name);
        Checked c = check(text);
        assert_true(c.ok);
        assert_int_equal(c.cfg.schedule, cases[i].kind);
        done(&c);
        free(text);
    }
}

static void test_split_and_spans(void **state)
{
    (void)state;
    const char *text = MODEL "pipeline {\n  stages 3\n  split [2, 1,\n   1]\n}\n" BATCH TRAIN;
    Checked c = check(text);
    assert_true(c.ok);
    assert_non_null(c.cfg.split_units); /* in units, four a layer */
    assert_int_equal(c.cfg.split_units[0], 8);
    assert_int_equal(c.cfg.split_units[1], 4);
    assert_int_equal(c.cfg.split_units[2], 4);
    assert_int_equal(c.cfg.span_stages.begin, (int)(strstr(text, "3\n") - text));
    assert_int_equal(c.cfg.span_split.begin, (int)(strstr(text, "[2") - text));
    assert_int_equal(c.cfg.span_split.end, (int)(strstr(text, "]") - text) + 1);
    assert_int_equal(c.cfg.span_micro.begin, (int)(strstr(text, "8 }") - text));
    assert_int_equal(c.cfg.span_model.begin, (int)(strstr(text, "gpt2") - text));
    /* window not written: later errors about it point at stages */
    assert_int_equal(c.cfg.span_window.begin, c.cfg.span_stages.begin);
    assert_true(c.cfg.span_memory.begin < 0);
    done(&c);
}

static void test_data_paths_resolve_against_the_file(void **state)
{
    (void)state;
    char dir[] = "/tmp/pacic_sema_XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *data = xasprintf("%s/train.bin", dir);
    FILE *f = fopen(data, "w");
    assert_non_null(f);
    fclose(f);
    char *path = xasprintf("%s/model.paci", dir);
    Checked c = check_as(path, MODEL PIPELINE BATCH
                         "train { steps 5; data \"train.bin\"; checkpoint { dir \"ck/pts\" } }\n", true);
    assert_true(c.ok);
    assert_string_equal(c.cfg.train_data, data);
    assert_string_equal(c.cfg.ckpt_dir, "ck/pts"); /* relative to run's folder: as written */
    done(&c);
    c = check_as(path, MODEL PIPELINE BATCH "train { steps 5; data \"/nonexistent/x.bin\" }\n", false);
    assert_true(c.ok); /* only a warning when the data is not needed */
    assert_string_equal(c.cfg.train_data, "/nonexistent/x.bin");
    assert_non_null(strstr(c.messages, "warning: cannot read training data '/nonexistent/x.bin': No such file or directory"));
    done(&c);
    c = check_as(path, MODEL PIPELINE BATCH "train { steps 5; val \"nope.bin\" }\n", true);
    assert_false(c.ok);
    char *expected = xasprintf("%s:4:22: error: cannot read validation data 'nope.bin' (resolved to '%s/nope.bin'): No such file or directory",
                               path, dir);
    char *line = first_line(&c);
    assert_string_equal(line, expected);
    free(line);
    free(expected);
    done(&c);
    unlink(data);
    rmdir(dir);
    free(data);
    free(path);
}

/* ---- semantic errors: exact text and position ------------------------------------------ */

static void test_unknown_key_suggests(void **state)
{
    (void)state;
    Checked c = check("model gpt2 { layrs 4; width 128; heads 4; context 64 }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:1:14: error: unknown key 'layrs' in 'model'; did you mean 'layers'?\n"
                        "model gpt2 { layrs 4; width 128; heads 4; context 64 }\n"
                        "             ^~~~~\n"
                        "t.paci:1:7: error: model 'gpt2' needs 'layers' (or use a preset: gpt2-small, gpt2-medium, gpt2-large, gpt2-xl)\n"
                        "model gpt2 { layrs 4; width 128; heads 4; context 64 }\n"
                        "      ^~~~\n");
    done(&c);
    assert_first_message(MODEL "pipline { stages 2 }\n" BATCH TRAIN,
                         "t.paci:2:1: error: unknown block 'pipline'; did you mean 'pipeline'?");
    assert_first_message(MODEL "pipeline { micro 2 }\n" BATCH TRAIN,
                         "t.paci:2:12: error: unknown key 'micro' in 'pipeline'; it belongs in 'batch'");
}

static void test_duplicate_key_with_note(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 2\n  stages 3 }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:3:3: error: duplicate 'stages' in 'pipeline'\n"
                        "  stages 3 }\n"
                        "  ^~~~~~\n"
                        "t.paci:2:12: note: first written here\n"
                        "pipeline { stages 2\n"
                        "           ^~~~~~\n");
    done(&c);
}

static void test_value_kind_count_integer_range(void **state)
{
    (void)state;
    assert_first_message(MODEL "pipeline { stages four }\n" BATCH TRAIN,
                         "t.paci:2:19: error: 'stages' must be an integer, not a word");
    assert_first_message(MODEL "pipeline { stages 2 3 }\n" BATCH TRAIN,
                         "t.paci:2:21: error: 'stages' takes one value; remove the extra value");
    assert_first_message(MODEL "pipeline { stages }\n" BATCH TRAIN,
                         "t.paci:2:12: error: 'stages' needs one value");
    assert_first_message(MODEL "pipeline { stages 2.5 }\n" BATCH TRAIN,
                         "t.paci:2:19: error: 'stages' must be an integer, not 2.5");
    assert_first_message(MODEL "pipeline { stages 65 }\n" BATCH TRAIN,
                         "t.paci:2:19: error: 'stages' 65 is out of range: it must be in 1..64");
    // The schedule table counts steps in 32 bits: more used to wrap silently (2^32 + 2 ran 2).
    assert_first_message(MODEL PIPELINE BATCH "train { steps 4294967298 }\n",
                         "t.paci:4:15: error: 'steps' 4294967298 is out of range: it must be in 1..2147483647");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { eps 0 } }\n",
                         "t.paci:4:40: error: 'eps' 0 is out of range: it must be in (0, 1e+30]");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { betas 0.9 } }\n",
                         "t.paci:4:42: error: 'betas' needs two numbers, e.g. 'betas 0.9 0.95'");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; data train.bin }\n",
                         "t.paci:4:23: error: 'data' must be a string in quotes, not a word");
    assert_first_message("model gpt2 { layers 4; width 128; heads 4; context 64; tied yes }\n" BATCH TRAIN,
                         "t.paci:1:61: error: 'tied' must be true or false, not yes");
    assert_first_message(MODEL PIPELINE "batch { micro { x 1 } }\n" TRAIN,
                         "t.paci:3:15: error: 'micro' takes a value, not a block");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer 3 }\n",
                         "t.paci:4:18: error: 'optimizer' is a block: write 'optimizer NAME { ... }'");
    /* an integer written with an exponent is still an integer */
    Checked c = check(MODEL PIPELINE BATCH "train { steps 1e4 }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.steps, 10000);
    done(&c);
}

static void test_heads_must_divide_width(void **state)
{
    (void)state;
    Checked c = check("model gpt2 { layers 4; width 128; heads 5; context 64 }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:1:41: error: heads 5 does not divide the width 128\n"
                        "model gpt2 { layers 4; width 128; heads 5; context 64 }\n"
                        "                                        ^\n");
    done(&c);
}

static void test_more_stages_than_layers(void **state)
{
    (void)state;
    assert_first_message(MODEL "pipeline { stages 8 }\n" BATCH TRAIN,
                         "t.paci:2:19: error: stages 8 is more than the model's 4 layers + 2: every stage but an embedding-only first and a head-only last needs at least one layer");
}

static void test_window_zero(void **state)
{
    (void)state;
    assert_first_message(MODEL "pipeline { window 0 }\n" BATCH TRAIN,
                         "t.paci:2:19: error: 'window' 0 is out of range: it must be in 1..1000000");
}

static void test_global_batch_checks(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4; window 4 }\nbatch { micro 8; global 48 }\n" TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:3:25: error: global 48 is not micro x window = 8 x 4 = 32\n"
                        "batch { micro 8; global 48 }\n"
                        "                        ^~\n"
                        "t.paci:2:29: note: window set here\n"
                        "pipeline { stages 4; window 4 }\n"
                        "                            ^\n");
    done(&c);
    assert_first_message(MODEL "pipeline { stages 4 }\nbatch { micro 8; global 44 }\n" TRAIN,
                         "t.paci:3:25: error: global 44 is not divisible by micro 8: the window would not be whole");
}

/* ---- data parallelism: parallel { data D } --------------------------------------------- */

static void test_parallel_data_default_and_parsed(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH TRAIN "hardware {}\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.replicas, 1);
    assert_true(c.cfg.network_bandwidth == 25e9);
    done(&c);
    c = check(MODEL PIPELINE "parallel { data 8 }\n" BATCH TRAIN "hardware { network_bandwidth 50e9 }\n");
    assert_true(c.ok);
    assert_string_equal(c.messages, "");
    assert_int_equal(c.cfg.replicas, 8);
    assert_int_equal(c.cfg.window, 4); /* the schedule is per pipeline: D leaves the window alone */
    assert_int_equal(c.cfg.global_batch, 8 * 4 * 8);
    assert_true(c.cfg.network_bandwidth == 50e9);
    done(&c);
}

static void test_parallel_data_range_and_kind(void **state)
{
    (void)state;
    assert_first_message(MODEL PIPELINE "parallel { data 0 }\n" BATCH TRAIN,
                         "t.paci:3:17: error: 'data' 0 is out of range: it must be in 1..1024");
    assert_first_message(MODEL PIPELINE "parallel { data 1025 }\n" BATCH TRAIN,
                         "t.paci:3:17: error: 'data' 1025 is out of range: it must be in 1..1024");
    assert_first_message(MODEL PIPELINE "parallel { data 2.5 }\n" BATCH TRAIN,
                         "t.paci:3:17: error: 'data' must be an integer, not 2.5");
    assert_first_message(MODEL PIPELINE "parallel { data eight }\n" BATCH TRAIN,
                         "t.paci:3:17: error: 'data' must be an integer, not a word");
    assert_first_message(MODEL PIPELINE "parallel { replicas 2 }\n" BATCH TRAIN,
                         "t.paci:3:12: error: unknown key 'replicas' in 'parallel'");
    assert_first_message(MODEL PIPELINE "paralel { data 2 }\n" BATCH TRAIN,
                         "t.paci:3:1: error: unknown block 'paralel'; did you mean 'parallel'?");
}

/* stages x data ranks in one job, at most MAX_WORLD_SIZE (4096): 6 x 683 = 4098. */
static void test_parallel_world_size_limit(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 6; window 6 }\nparallel { data 683 }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:3:17: error: data 683 x stages 6 = 4098 ranks (one GPU each) is above the limit "
                        "of 4096 ranks in one job; data 682 fits these stages\n"
                        "parallel { data 683 }\n"
                        "                ^~~\n"
                        "t.paci:2:19: note: stages set here\n"
                        "pipeline { stages 6; window 6 }\n"
                        "                  ^\n");
    done(&c);
    c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 1024 }\n" BATCH TRAIN);
    assert_true(c.ok); /* 4 x 1024 = 4096: the limit itself */
    assert_int_equal(c.cfg.replicas, 1024);
    done(&c);
}

/* global = micro x window x D; without a window, global / (micro x D) sets it. */
static void test_global_batch_with_data(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 2 }\nbatch { micro 8; global 32 }\n"
                      TRAIN);
    assert_false(c.ok);
    assert_string_equal(c.messages,
                        "t.paci:4:25: error: global 32 is not micro x window x data = 8 x 4 x 2 = 64\n"
                        "batch { micro 8; global 32 }\n"
                        "                        ^~\n"
                        "t.paci:2:29: note: window set here\n"
                        "pipeline { stages 4; window 4 }\n"
                        "                            ^\n"
                        "t.paci:3:17: note: data-parallel replicas set here\n"
                        "parallel { data 2 }\n"
                        "                ^\n");
    done(&c);
    c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 2 }\nbatch { micro 8; global 64 }\n" TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.global_batch, 64);
    done(&c);
    c = check(MODEL "pipeline { stages 4 }\nparallel { data 4 }\nbatch { micro 8; global 256 }\n" TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.window, 8); /* 256 / (8 x 4) */
    assert_int_equal(c.cfg.global_batch, 256);
    done(&c);
    /* 40 is divisible by micro 8 but not by micro x data = 16 */
    assert_first_message(MODEL "pipeline { stages 4 }\nparallel { data 2 }\nbatch { micro 8; global 40 }\n" TRAIN,
                         "t.paci:4:25: error: global 40 is not divisible by micro x data = 8 x 2 = 16: the window "
                         "would not be whole");
    /* a broken data reports once, not again as a global mismatch */
    c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 0 }\nbatch { micro 8; global 64 }\n" TRAIN);
    assert_false(c.ok);
    assert_null(strstr(c.messages, "global"));
    done(&c);
}

/* The lr rule scales to micro x window x D: lr 1e-3 at 32, micro 4, window 4. */
static void test_lr_scales_with_data(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 8 }\nbatch { micro 4 }\n"
                      "train { steps 100; optimizer adamw { lr 1e-3 at 32 scale linear } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.global_batch, 128);
    assert_true(fabs(c.cfg.lr - 4e-3) < 1e-15); /* 1e-3 x 128 / 32; without D: 1e-3 x 16 / 32 */
    done(&c);
    c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 2 }\nbatch { micro 4 }\n"
              "train { steps 100; optimizer adamw { lr 1e-3 at 64 scale sqrt } }\n");
    assert_true(c.ok);
    assert_true(fabs(c.cfg.lr - 1e-3 * sqrt(0.5)) < 1e-15); /* sqrt(32 / 64) */
    done(&c);
    /* no `at`: the lr is the global batch's own, which counts the replicas */
    c = check(MODEL "pipeline { stages 4; window 4 }\nparallel { data 2 }\nbatch { micro 4 }\n"
              "train { steps 100; optimizer adamw { lr 1e-3 } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.lr_base_batch, 32);
    assert_true(c.cfg.lr == 1e-3);
    done(&c);
}

/* Half layers: 1.5 ends a stage after a layer's attention half; 0.5 is a half alone; .75
 * cuts after the fc product, .25 after the attention kernel; the sum counts quarters; a stage
 * that starts inside a layer and does not reach its end, or a boundary elsewhere, is an
 * error at the entry. */
static void test_split_half_layers(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 3; split [1.5, 0.5, 2] }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.split_units[0], 6);
    assert_int_equal(c.cfg.split_units[1], 2);
    assert_int_equal(c.cfg.split_units[2], 8);
    done(&c);
    /* .75: after the fc product; an entry is what lies between two boundaries */
    c = check(MODEL "pipeline { stages 3; split [1.75, 0.75, 1.5] }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.split_units[0], 7);
    assert_int_equal(c.cfg.split_units[1], 3);
    assert_int_equal(c.cfg.split_units[2], 6);
    done(&c);
    /* .25: after the attention kernel; the stage after holds the rest of that layer */
    c = check(MODEL "pipeline { stages 3; split [1.25, 0.75, 2] }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.split_units[0], 5);
    assert_int_equal(c.cfg.split_units[1], 3);
    assert_int_equal(c.cfg.split_units[2], 8);
    done(&c);
    c = check(MODEL "pipeline { stages 3; split [1.25, 0.5, 2.25] }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_non_null(strstr(c.messages, "stage 1 of 'split' starts at layer 1's attention projection (.25) and ends "
                                       "inside that layer (at 1.75)"));
    done(&c);
    c = check(MODEL "pipeline { stages 3; split [1.125, 0.875, 2] }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_non_null(strstr(c.messages, "'split' puts a stage boundary at 1.125 layers, inside layer 1"));
    done(&c);
    c = check(MODEL "pipeline { stages 3; split [1.5, 0.25, 2.25] }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_non_null(strstr(c.messages, "stage 1 of 'split' would hold only layer 1's LayerNorm 2 and fc product"));
    done(&c);
    c = check(MODEL "pipeline { stages 3; split [1.5, 0.5, 1.5] }\n" BATCH TRAIN);
    assert_false(c.ok);
    assert_non_null(strstr(c.messages, "'split' covers 3.5 of the model's 4 layers: layer 3's MLP half would be in no stage"));
    done(&c);
}

/* A 0 at either end: an embedding-only first stage, a head-only last one; 6 stages over 4
 * layers then fit. */
static void test_split_end_stages_may_be_empty(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4; split [0, 2, 2, 0] }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_int_equal(c.cfg.split_units[0], 0);
    assert_int_equal(c.cfg.split_units[3], 0);
    done(&c);
    c = check(MODEL "pipeline { stages 6 }\n" BATCH TRAIN);
    assert_true(c.ok);
    done(&c);
}

static void test_split_errors(void **state)
{
    (void)state;
    assert_first_message(MODEL "pipeline { stages 3; split [2, 2] }\n" BATCH TRAIN,
                         "t.paci:2:28: error: 'split' has 2 entries but there are 3 stages");
    assert_first_message(MODEL "pipeline { stages 3; split [2, 0, 2] }\n" BATCH TRAIN,
                         "t.paci:2:32: error: stage 1 of 'split' has 0 layers; only the first stage (embedding only) or the last (LM head only) may hold none, or under vocab_split the one before the last (the head's first rows)");
    assert_first_message(MODEL "pipeline { stages 4; split [1, 0, 1, 2] }\n" BATCH TRAIN,
                         "t.paci:2:32: error: stage 1 of 'split' has 0 layers; only the first stage (embedding only) or the last (LM head only) may hold none");
    assert_first_message(MODEL "pipeline { stages 3; split [2, 2, 0]; vocab_split 300 }\n" BATCH TRAIN,
                         "t.paci:2:51: error: vocab_split 300 leaves the last stage no row of the LM head: it must be below the vocabulary's 256 rows (0: no split)");
    assert_first_message(MODEL "pipeline { stages 3; split [2, 2, -1] }\n" BATCH TRAIN,
                         "t.paci:2:35: error: 'split' -1 is out of range: it must be in [0, 1024]");
    assert_first_message(MODEL "pipeline { stages 2; split [1, 2] }\n" BATCH TRAIN,
                         "t.paci:2:28: error: 'split' covers 3 of the model's 4 layers: layer 3 would be in no stage");
    assert_first_message(MODEL "pipeline { stages 2; split [3, 3] }\n" BATCH TRAIN,
                         "t.paci:2:28: error: 'split' assigns 6 layers but the model has 4: layers 4..5 would not exist");
    assert_first_message(MODEL "pipeline { stages 2; split 2 }\n" BATCH TRAIN,
                         "t.paci:2:28: error: 'split' must be a list of layers per stage, e.g. [3, 3, 2], not a number");
}

static void test_tied_needs_one_stage(void **state)
{
    (void)state;
    assert_first_message("model gpt2 { layers 4; width 128; heads 4; context 64; tied true }\n" PIPELINE BATCH TRAIN,
                         "t.paci:1:61: error: 'tied true' needs stages 1: with 4 stages the embedding and the LM head sit on different stages");
    Checked c = check("model gpt2 { layers 4; width 128; heads 4; context 64; tied true }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_true(c.cfg.tied);
    done(&c);
}

static void test_missing_required(void **state)
{
    (void)state;
    assert_first_message(MODEL PIPELINE "batch { }\n" TRAIN,
                         "t.paci:3:7: error: 'batch' block needs 'micro'");
    assert_first_message(MODEL PIPELINE BATCH, "t.paci: error: no 'train' block; it is required");
    assert_first_message("model {}\n" BATCH TRAIN,
                         "t.paci:1:7: error: 'model' needs a name before '{': one of gpt2, gpt2-small, gpt2-medium, gpt2-large, gpt2-xl");
    assert_first_message("model gpt3 {}\n" BATCH TRAIN, "t.paci:1:7: error: unknown model 'gpt3'; did you mean 'gpt2'?");
}

static void test_unknown_schedule_suggests(void **state)
{
    (void)state;
    assert_first_message(MODEL "pipeline { schedule pacci }\n" BATCH TRAIN,
                         "t.paci:2:21: error: unknown schedule 'pacci'; did you mean 'paci'?");
    assert_first_message(MODEL "pipeline { schedule 1fb1 }\n" BATCH TRAIN,
                         "t.paci:2:21: error: unknown schedule '1fb1'; did you mean '1f1b'?");
    assert_first_message(MODEL "pipeline { schedule zb }\n" BATCH TRAIN,
                         "t.paci:2:21: error: unknown schedule 'zb' (expected one of: gpipe, 1f1b, pipedream, paci, zb-h1, zb-h2, interleaved, zb-v)");
}

static void test_warnings_do_not_fail(void **state)
{
    (void)state;
    Checked c = check(MODEL "pipeline { stages 4; window 1 }\n" BATCH TRAIN);
    assert_true(c.ok);
    char *line = first_line(&c);
    assert_string_equal(line, "t.paci:2:29: warning: window 1 is below stages - 1 = 3: stage 0 crosses ceil((p-1)/K) = 3 "
                              "optimizer updates between a micro-batch's forward and backward; window >= p-1 bounds it to 1");
    free(line);
    done(&c);
    /* the same window under a flush schedule does not drift: no warning */
    c = check(MODEL "pipeline { stages 4; window 1; schedule 1f1b }\n" BATCH TRAIN);
    assert_true(c.ok);
    assert_string_equal(c.messages, "");
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 100; lr_schedule { warmup 200 } }\n");
    assert_true(c.ok);
    line = first_line(&c);
    assert_string_equal(line, "t.paci:4:41: warning: warmup 200 steps is longer than the 100 training steps: the lr never reaches its peak");
    free(line);
    done(&c);
    /* compression dgc's warm-up: one step short of the run reaches its density at the last
     * step, silently (tests/golden/err_warn_dgc_warmup: as long as the run warns); density 1
     * has nothing to warm up */
    c = check(MODEL PIPELINE BATCH "train { steps 100 }\n"
              "parallel { data 2; compression dgc { density 0.01; warmup_steps 99 } }\n");
    assert_true(c.ok);
    assert_string_equal(c.messages, "");
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 100 }\n"
              "parallel { data 2; compression dgc { density 1; warmup_steps 500 } }\n");
    assert_true(c.ok);
    assert_string_equal(c.messages, "");
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 100 }\n"
              "parallel { data 2; compression dgc { density 0.5; warmup_steps 101 } }\n");
    assert_true(c.ok);
    line = first_line(&c);
    assert_string_equal(line, "t.paci:5:64: warning: warmup_steps 101 is not shorter than the 100 training steps: "
                              "the density never reaches 0.5; it falls from 1 at step 1 to 0.507 at the last step");
    free(line);
    done(&c);
}

static void test_lr_errors(void **state)
{
    (void)state;
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { lr 1e-3 on 32 } }\n",
                         "t.paci:4:44: error: expected 'at BATCH' or 'scale RULE' after the lr, not on");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { lr 1e-3 at 32 scale sqr } }\n",
                         "t.paci:4:56: error: unknown lr scale rule 'sqr'; did you mean 'sqrt'?");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer sgd { } }\n",
                         "t.paci:4:28: error: unknown optimizer 'sgd' (expected one of: adamw, muon, lamb, lars, nadamw, lans)");
}

/* Each optimizer's keys, its defaults, and located errors for keys of another optimizer. */
static void test_optimizers(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { weight_decay 0.05; "
                      "adamw { lr 1e-3; betas 0.8 0.9 } } }\n");
    assert_true(c.ok);
    assert_int_equal(c.cfg.optimizer, PR_OPT_MUON);
    assert_true(c.cfg.lr_base == 0.02 && c.cfg.momentum == 0.95 && c.cfg.nesterov && c.cfg.ns_steps == 5);
    assert_true(c.cfg.group_lr == 1e-3 && c.cfg.group_beta1 == 0.8 && c.cfg.group_beta2 == 0.9);
    assert_true(c.cfg.group_weight_decay == 0.05 && c.cfg.shape_scale == PR_MUON_SCALE_RATIO);
    done(&c);
    c = check(MODEL PIPELINE BATCH "train { steps 5; optimizer lars { lr 0.1 } }\n");
    assert_true(c.ok);
    assert_true(c.cfg.optimizer == PR_OPT_LARS && c.cfg.momentum == 0.9 && c.cfg.trust_coefficient == 0.001);
    done(&c);
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer lars { betas 0.9 0.99 } }\n",
                         "t.paci:4:35: error: 'betas' is not a key of optimizer lars (its keys: lr momentum "
                         "trust_coefficient eps weight_decay clip post_validation )");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { momentum 0.9 } }\n",
                         "t.paci:4:36: error: 'momentum' is not a key of optimizer adamw (its keys: lr betas "
                         "eps weight_decay clip post_validation )");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer lamb { adamw { lr 1e-3 } } }\n",
                         "t.paci:4:35: error: 'adamw' is not a key of optimizer lamb (its keys: lr betas "
                         "eps weight_decay clip post_validation )");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { betas 0.9 0.95 } }\n",
                         "t.paci:4:35: error: 'betas' is not a key of optimizer muon (its keys: lr momentum "
                         "nesterov ns_steps shape_scale weight_decay clip post_validation adamw ); the AdamW group's goes in "
                         "its 'adamw { ... }' block");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { ns_steps 0 } }\n",
                         "t.paci:4:44: error: 'ns_steps' 0 is out of range: it must be in 1..20");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { momentum 1 } }\n",
                         "t.paci:4:44: error: 'momentum' 1 is out of range: it must be in [0, 0.9999]");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { shape_scale big } }\n",
                         "t.paci:4:47: error: unknown shape_scale 'big' (expected one of: ratio, rms)");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { adamw { betas 0.9 1 } } }\n",
                         "t.paci:4:53: error: 'betas' 1 is out of range: it must be in [0, 1)");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer muon { adamw { nesterov true } } }\n",
                         "t.paci:4:43: error: unknown key 'nesterov' in 'adamw'; it belongs in 'optimizer'");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer lars { trust_coefficient 0 } }\n",
                         "t.paci:4:53: error: 'trust_coefficient' 0 is out of range: it must be in (0, 1e+30]");
}

/* nadamw's keys and defaults, and `delay_correction nesterov`'s requirements, each at its span. */
static void test_nadamw(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; optimizer nadamw { betas 0.8 0.99 } }\n");
    assert_true(c.ok);
    assert_true(c.cfg.optimizer == PR_OPT_NADAMW && c.cfg.momentum_decay == 0.004 && c.cfg.beta1 == 0.8);
    assert_true(c.cfg.weight_decay == 0.1 && c.cfg.eps == 1e-8 && c.cfg.delay_correction == DELAY_NONE);
    done(&c);
    c = check(MODEL "pipeline { stages 4; schedule pipedream; delay_correction nesterov }\n" BATCH
              "train { steps 5; optimizer nadamw { momentum_decay 0.01 } }\n");
    assert_true(c.ok && c.cfg.delay_correction == DELAY_NESTEROV && c.cfg.momentum_decay == 0.01);
    done(&c);
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer nadamw { momentum_decay -1 } }\n",
                         "t.paci:4:52: error: 'momentum_decay' -1 is out of range: it must be in [0, 1e+30]");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer nadamw { momentum 0.9 } }\n",
                         "t.paci:4:37: error: 'momentum' is not a key of optimizer nadamw (its keys: lr betas "
                         "eps weight_decay momentum_decay clip post_validation )");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer adamw { momentum_decay 0.004 } }\n",
                         "t.paci:4:36: error: 'momentum_decay' is not a key of optimizer adamw (its keys: lr "
                         "betas eps weight_decay clip post_validation )");
    assert_first_message(MODEL "pipeline { stages 4; delay_correction nesterov }\n" BATCH "train { steps 5 }\n",
                         "t.paci:2:39: error: delay_correction nesterov raises NAdamW's beta1 with each stage's "
                         "delay; it needs optimizer nadamw, not adamw (or delay_correction none)");
    assert_first_message(MODEL "pipeline { stages 4; schedule 1f1b; delay_correction nesterov }\n" BATCH
                         "train { steps 5; optimizer nadamw { } }\n",
                         "t.paci:2:54: error: delay_correction nesterov needs an asynchronous schedule (paci or "
                         "pipedream): under 1f1b a micro-batch's forward and backward straddle no optimizer step "
                         "(use delay_correction none)");
}

/* lans's keys and defaults (LAMB's), a key of another optimizer, and delay_correction predict,
 * which it takes (along LAMB's direction) where lars is refused. */
static void test_lans(void **state)
{
    (void)state;
    Checked c = check(MODEL PIPELINE BATCH "train { steps 5; optimizer lans { betas 0.8 0.99; eps 1e-6 } }\n");
    assert_true(c.ok);
    assert_true(c.cfg.optimizer == PR_OPT_LANS && c.cfg.beta1 == 0.8 && c.cfg.beta2 == 0.99 && c.cfg.eps == 1e-6);
    assert_true(c.cfg.weight_decay == 0.1 && c.cfg.lr_base == 3e-4);
    done(&c);
    c = check(MODEL "pipeline { stages 4; schedule paci; delay_correction predict }\n" BATCH
              "train { steps 5; optimizer lans { } }\n");
    assert_true(c.ok && c.cfg.delay_correction == DELAY_PREDICT);
    done(&c);
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer lans { momentum 0.9 } }\n",
                         "t.paci:4:35: error: 'momentum' is not a key of optimizer lans (its keys: lr betas "
                         "eps weight_decay clip post_validation )");
    assert_first_message(MODEL PIPELINE BATCH "train { steps 5; optimizer lans { trust_coefficient 0.01 } }\n",
                         "t.paci:4:35: error: 'trust_coefficient' is not a key of optimizer lans (its keys: lr "
                         "betas eps weight_decay clip post_validation )");
}

/* ---- syntax ----------------------------------------------------------------------------- */

static void test_syntax_unexpected_token(void **state)
{
    (void)state;
    Checked c = check("model gpt2 { layers 4; width } ]\n");
    assert_false(c.parsed);
    assert_string_equal(c.messages,
                        "t.paci:1:32: error: unexpected ']', expecting end of file, word, end of line or ';'\n"
                        "model gpt2 { layers 4; width } ]\n"
                        "                               ^\n");
    done(&c);
}

static void test_syntax_recovers_and_reports_each_error_once(void **state)
{
    (void)state;
    Checked c = check("model gpt2 { layers ] 4 }\npipeline { stages , }\nbatch { micro 8 }\n");
    assert_false(c.parsed);
    assert_string_equal(c.messages,
                        "t.paci:1:21: error: unexpected ']', expecting a value, end of line, ';', '{' or '}'\n"
                        "model gpt2 { layers ] 4 }\n"
                        "                    ^\n"
                        "t.paci:2:19: error: unexpected ',', expecting a value, end of line, ';', '{' or '}'\n"
                        "pipeline { stages , }\n"
                        "                  ^\n");
    done(&c);
}

static void test_unclosed_block_names_its_line(void **state)
{
    (void)state;
    Checked c = check("model gpt2 { layers 4 }\n\ntrain {\n  steps 10\n");
    assert_false(c.parsed);
    assert_string_equal(c.messages,
                        "t.paci:4:11: error: '}' expected to close 'train' block opened at line 3\n"
                        "  steps 10\n"
                        "          ^\n");
    done(&c);
    assert_first_message("x { a 1 } }\n", "t.paci:1:11: error: unexpected '}': no block is open here");
}

static void test_lexical_errors(void **state)
{
    (void)state;
    Checked c = check("train { data \"abc\n}\n");
    assert_false(c.parsed);
    assert_string_equal(c.messages,
                        "t.paci:1:14: error: unterminated string: '\"' expected before the end of the line\n"
                        "train { data \"abc\n"
                        "             ^\n");
    done(&c);
    assert_first_message("x { a 1.2.3 }\n", "t.paci:1:7: error: malformed number '1.2.3'");
    assert_first_message("x { a 1e999 }\n", "t.paci:1:7: error: number '1e999' is out of range");
    assert_first_message("x { a @ }\n", "t.paci:1:7: error: unexpected '@'");
    assert_first_message("x { a \"a\\tb\" }\n", "t.paci:1:9: error: unknown escape '\\t' in string (known: \\\" \\\\ \\n)");
}

/* Integer keys read their digits exactly: 2^53 + 1 is not 2^53 (two seeds, one run), and a
 * value past the range is refused with the real range, not rounded into it. */
static void test_integers_exact(void **state)
{
    (void)state;
    static const struct { const char *seed; uint64_t want; } exact[] = {
        {"9007199254740993", 9007199254740993ull}, {"18446744073709551615", UINT64_MAX},
        {"9_007_199_254_740_993", 9007199254740993ull}, {"9007199254740.993e3", 9007199254740993ull},
        {"1.8e19", 18000000000000000000ull}, {"0", 0}, {"1e4", 10000},
    };
    for (size_t i = 0; i < sizeof exact / sizeof *exact; i++) {
        char *text = xasprintf(MODEL BATCH "train { steps 10; seed %s }\n", exact[i].seed);
        Checked c = check(text);
        assert_true(c.ok);
        assert_true(c.cfg.seed == exact[i].want);
        done(&c);
        free(text);
    }
    assert_first_message(MODEL BATCH "train { steps 10; seed 18446744073709551616 }\n",
                         "t.paci:3:24: error: 'seed' 18446744073709551616 is out of range: it must be in "
                         "0..18446744073709551615");
    assert_first_message(MODEL BATCH "train { steps 10; seed 99999999999999999999 }\n",
                         "t.paci:3:24: error: 'seed' 99999999999999999999 is out of range: it must be in "
                         "0..18446744073709551615");
    assert_first_message(MODEL BATCH "train { steps 10; seed -1 }\n",
                         "t.paci:3:24: error: 'seed' -1 is out of range: it must be in 0..18446744073709551615");
    assert_first_message(MODEL BATCH "train { steps 10; seed 1.00000000000000000001e19 }\n",
                         "t.paci:3:24: error: 'seed' must be an integer, not 1.00000000000000000001e19");
    assert_first_message(MODEL BATCH "train { steps 2147483648 }\n",
                         "t.paci:3:15: error: 'steps' 2147483648 is out of range: it must be in 1..2147483647");
}

/* Every range message states the range its check holds: the machine's rates [1, 1e30], so
 * that no time the cost model works out is inf or nan. */
static void test_range_messages_state_the_range(void **state)
{
    (void)state;
    assert_first_message(MODEL BATCH TRAIN "hardware gpu { flops 1e300 }\n",
                         "t.paci:4:22: error: 'flops' 1e300 is out of range: it must be in [1, 1e+30]");
    assert_first_message(MODEL BATCH TRAIN "hardware gpu { flops 1e-300 }\n",
                         "t.paci:4:22: error: 'flops' 1e-300 is out of range: it must be in [1, 1e+30]");
    assert_first_message(MODEL BATCH TRAIN "hardware gpu { bandwidth 0.5 }\n",
                         "t.paci:4:26: error: 'bandwidth' 0.5 is out of range: it must be in [1, 1e+30]");
    assert_first_message(MODEL BATCH "train { steps 10; optimizer adamw { clip 1e31 } }\n",
                         "t.paci:3:42: error: 'clip' 1e31 is out of range: it must be in [0, 1e+30]");
    assert_first_message(MODEL BATCH "train { steps 10; optimizer adamw { betas 1e31 0.9 } }\n",
                         "t.paci:3:43: error: 'betas' 1e31 is out of range: it must be in [0, 1)");
    assert_first_message(MODEL BATCH "train { steps 10; optimizer adamw { betas -1 0.9 } }\n",
                         "t.paci:3:43: error: 'betas' -1 is out of range: it must be in [0, 1)");
    assert_first_message(MODEL BATCH "train { steps 10; checkpoint { keep 1e10 } }\n",
                         "t.paci:3:37: error: 'keep' 1e10 is out of range: it must be in 1..1000000000");
}

static void test_strings_words_and_comments(void **state)
{
    (void)state;
    const char *text = "# comment\nx gpt2-medium { a \"q\\\"\\\\\\n\" 1f1b 12% [1,\n 2,] ; b 3 } # end\n";
    size_t size = 0;
    char *dump = NULL;
    FILE *out = open_memstream(&dump, &size);
    Source src = {"t.paci", text, strlen(text)};
    Ast *ast = parse_source(&src);
    assert_non_null(ast);
    ast_dump(out, &src, ast);
    ast_free(ast);
    fclose(out);
    assert_string_equal(dump,
                        "file t.paci\n"
                        "  2:1 block x name gpt2-medium\n"
                        "    2:17 entry a\n"
                        "      2:19 string \"q\\\"\\\\\\n\"\n"
                        "      2:29 word 1f1b\n"
                        "      2:34 percent 12% = 12%\n"
                        "      2:38 list (2 items)\n"
                        "        2:39 number 1 = 1 (integer)\n"
                        "        3:2 number 2 = 2 (integer)\n"
                        "    3:8 entry b\n"
                        "      3:10 number 3 = 3 (integer)\n");
    free(dump);
}

/* The cursor must give diag_line_col's answer at every offset, asked forward, backward and
 * out of range. */
static void test_line_cursor_matches_line_col(void **state)
{
    (void)state;
    const char *text = "ab\n\ncd\tef\n\xc3\xa9x\n";
    Source src = {"t.paci", text, strlen(text)};
    const int offsets[] = {0, 1, 2, 3, 4, 7, 5, 5, 12, 0, 20, -3, 9, 14};
    LineCursor cursor = {0};
    for (size_t i = 0; i < sizeof offsets / sizeof offsets[0]; i++) {
        int line, col, want_line, want_col;
        line_cursor_find(&cursor, &src, offsets[i], &line, &col);
        diag_line_col(&src, offsets[i], &want_line, &want_col);
        assert_int_equal(line, want_line);
        assert_int_equal(col, want_col);
    }
    int line, col;
    line_cursor_find(&cursor, &src, 5, &line, &col);
    assert_int_equal(line, 3);
    assert_int_equal(col, 2);
}

static void test_lex_dump(void **state)
{
    (void)state;
    const char *text = "a 1_000 ; b\t3e-4\n\n";
    size_t size = 0;
    char *dump = NULL;
    FILE *out = open_memstream(&dump, &size);
    Source src = {"t.paci", text, strlen(text)};
    lex_dump(out, &src);
    fclose(out);
    assert_string_equal(dump, "1:1 word a\n1:3 number 1_000\n1:9 punct ;\n1:11 word b\n1:13 number 3e-4\n1:17 newline \\n\n");
    free(dump);
}

static void test_nesting_is_bounded(void **state)
{
    (void)state;
    StrBuf deep = {0};
    for (int i = 0; i < 1000; i++)
        sb_puts(&deep, "a {");
    Checked c = check(deep.data);
    assert_false(c.parsed);
    char *line = first_line(&c);
    assert_string_equal(line, "t.paci:1:51: error: blocks nested more than 16 deep");
    free(line);
    done(&c);
    sb_free(&deep);
}

static void test_binary_input_stops_early(void **state)
{
    (void)state;
    char junk[4096];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (char)(0x80 + i % 64);
    junk[sizeof junk - 1] = '\0';
    Checked c = check(junk);
    assert_false(c.parsed);
    assert_int_equal(diag_error_count(), 1); /* one run of bad bytes */
    done(&c);
}

static void test_syntax_error_flood_stops(void **state)
{
    (void)state;
    StrBuf text = {0};
    for (int i = 0; i < 1000; i++)
        sb_puts(&text, "x { ] }\n");
    Checked c = check(text.data);
    assert_false(c.parsed);
    assert_int_equal(diag_error_count(), 21); /* 20 errors and "too many errors" */
    assert_non_null(strstr(c.messages, "t.paci:20:5: error: too many errors; is this a .paci file?"));
    done(&c);
    sb_free(&text);
}

/* A large file parses in linear time, and a flood of semantic errors is counted but
 * printed only up to the cap. */
static void test_huge_file(void **state)
{
    (void)state;
    StrBuf text = {0};
    sb_puts(&text, MODEL PIPELINE BATCH TRAIN);
    for (int i = 0; i < 200000; i++)
        sb_puts(&text, "hardwar { flops 1 }\n");
    Checked c = check(text.data);
    assert_true(c.parsed);
    assert_false(c.ok);
    assert_int_equal(diag_error_count(), 200000);
    assert_non_null(strstr(c.messages, "pacic: too many errors (100); the rest are not shown\n"));
    assert_true(strlen(c.messages) < 100 * 200);
    done(&c);
    sb_free(&text);
}

/* ---- the printer and suggestions --------------------------------------------------------- */

static void test_tabs_expand_under_the_caret(void **state)
{
    (void)state;
    Checked c = check("x {\n\ta\t@@ }\n");
    assert_string_equal(c.messages,
                        "t.paci:2:4: error: unexpected '@@'\n"
                        "        a       @@ }\n"
                        "                ^~\n");
    done(&c);
}

/* A line longer than 160 bytes is shown as a window around the error, cut with "...", the
 * caret still under it; a short line is shown whole (above). */
static void test_long_line_shown_as_a_window(void **state)
{
    (void)state;
    StrBuf text = {0};
    sb_puts(&text, "model gpt2 { layers 4;");
    for (int i = 0; i < 100; i++)
        sb_puts(&text, " width 4;");
    sb_puts(&text, " @@");
    for (int i = 0; i < 100; i++)
        sb_puts(&text, " width 4;");
    sb_puts(&text, " }\n");
    Checked c = check(text.data);
    const char *line = strchr(c.messages, '\n') + 1, *caret = strchr(line, '\n') + 1;
    assert_true(strncmp(c.messages, "t.paci:1:924: error: unexpected '@@'", 36) == 0);
    assert_true(strncmp(line, "...", 3) == 0 && strncmp(line + 3 + 60, "@@ width 4;", 11) == 0);
    assert_int_equal(caret - line, 3 + 160 + 3 + 1); // "...", 160 bytes of the line, "...", '\n'
    assert_true(strncmp(caret + 3 + 60, "^~\n", 3) == 0); // 60 bytes before the span
    done(&c);
    sb_free(&text);
}

static void test_did_you_mean(void **state)
{
    (void)state;
    static const char *const names[] = {"layers", "width", "heads", "context", NULL};
    assert_string_equal(did_you_mean("layrs", names), "layers");
    assert_string_equal(did_you_mean("widht", names), "width");
    assert_string_equal(did_you_mean("Heads", names), "heads");
    assert_null(did_you_mean("stages", names));
    assert_null(did_you_mean("x", names));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_file_fills_config),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_presets_and_overrides),
        cmocka_unit_test(test_numbers_with_underscores_and_exponents),
        cmocka_unit_test(test_lr_scale_rules),
        cmocka_unit_test(test_warmup_percentage_rounds_and_keeps_one),
        cmocka_unit_test(test_global_sets_window),
        cmocka_unit_test(test_bf16_flops_and_precision),
        cmocka_unit_test(test_hardware_cpu),
        cmocka_unit_test(test_on_nan),
        cmocka_unit_test(test_attention),
        cmocka_unit_test(test_schedules_by_name),
        cmocka_unit_test(test_split_and_spans),
        cmocka_unit_test(test_split_half_layers),
        cmocka_unit_test(test_data_paths_resolve_against_the_file),
        cmocka_unit_test(test_unknown_key_suggests),
        cmocka_unit_test(test_duplicate_key_with_note),
        cmocka_unit_test(test_value_kind_count_integer_range),
        cmocka_unit_test(test_heads_must_divide_width),
        cmocka_unit_test(test_more_stages_than_layers),
        cmocka_unit_test(test_window_zero),
        cmocka_unit_test(test_global_batch_checks),
        cmocka_unit_test(test_parallel_data_default_and_parsed),
        cmocka_unit_test(test_parallel_data_range_and_kind),
        cmocka_unit_test(test_parallel_world_size_limit),
        cmocka_unit_test(test_global_batch_with_data),
        cmocka_unit_test(test_lr_scales_with_data),
        cmocka_unit_test(test_split_errors),
        cmocka_unit_test(test_split_end_stages_may_be_empty),
        cmocka_unit_test(test_tied_needs_one_stage),
        cmocka_unit_test(test_missing_required),
        cmocka_unit_test(test_unknown_schedule_suggests),
        cmocka_unit_test(test_warnings_do_not_fail),
        cmocka_unit_test(test_lr_errors),
        cmocka_unit_test(test_optimizers),
        cmocka_unit_test(test_nadamw),
        cmocka_unit_test(test_lans),
        cmocka_unit_test(test_syntax_unexpected_token),
        cmocka_unit_test(test_syntax_recovers_and_reports_each_error_once),
        cmocka_unit_test(test_unclosed_block_names_its_line),
        cmocka_unit_test(test_lexical_errors),
        cmocka_unit_test(test_integers_exact),
        cmocka_unit_test(test_range_messages_state_the_range),
        cmocka_unit_test(test_strings_words_and_comments),
        cmocka_unit_test(test_lex_dump),
        cmocka_unit_test(test_line_cursor_matches_line_col),
        cmocka_unit_test(test_nesting_is_bounded),
        cmocka_unit_test(test_binary_input_stops_early),
        cmocka_unit_test(test_syntax_error_flood_stops),
        cmocka_unit_test(test_huge_file),
        cmocka_unit_test(test_tabs_expand_under_the_caret),
        cmocka_unit_test(test_long_line_shown_as_a_window),
        cmocka_unit_test(test_did_you_mean),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
