/*
** cli.c
** Command-line parsing with getopt_long: strict numbers, known flags only,
** flags that belong to the command they are given to, options before or
** after the command (`fatune --arch sm_100 list`), `--flag=value`, the
** nearest flag, command or value suggested for a typo, and each command's
** own help, rendered from the tables below.
**
** To add an option: one line in `flags` (name without the dashes, group,
** whether it takes a value, its metavariable and help), its effect in
** apply(), and its group in the `commands` entries it applies to (a new
** group is the next free bit of the F_ enum). Help, completion and the man
** page follow from the tables.
*/
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "estimate.h"
#include "gen.h"

enum {
  F_DIM = 1, F_SEQ = 2, F_ARCH = 4, F_JOBS = 8, F_JSON = 16, F_SPACE = 32, F_PICK = 64,
  F_TYPE = 128, F_BACKEND = 256, F_EMU = 512, F_SEED = 1024, F_IO = 2048, F_SCALE = 4096,
  F_SCHED = 8192, F_WORK = 16384, F_DB = 32768, F_DEV = 65536, F_FMT = 131072,
  F_AXIS = 1 << 18, F_OUT = 1 << 19, F_RETUNE = 1 << 20,
  F_SASS = 1 << 21, F_GPU = 1 << 22, F_SAVE = 1 << 23, F_SHARD = 1 << 24, F_OP = 1 << 25,
  F_MODEL = 1 << 26, F_BUDGET = 1 << 27, F_MOD = 1 << 28, F_VARLEN = 1 << 29,
  F_WORKLOAD = 1 << 30
};

typedef struct cmd_info {
  const char *name;     /* NULL: the main job */
  cli_cmd cmd;
  int flags;            /* the groups of flags it takes */
  const char *synopsis; /* after "fatune NAME " */
  const char *summary;  /* what it does, one paragraph */
  const char *example;
  const char *brief;    /* its line in fatune's help */
} cmd_info;

static const cmd_info commands[] = {
  {NULL, CMD_TUNE, F_DIM | F_TYPE | F_SEQ | F_SCALE | F_ARCH | F_JOBS | F_JSON | F_SPACE |
                   F_BACKEND | F_EMU | F_SEED | F_WORK | F_RETUNE | F_DB | F_SASS | F_GPU |
                   F_PICK | F_SHARD | F_OP | F_MOD | F_WORKLOAD,
   "[--dim D] [--seq N] [problem flags] [--op OP] [--backend B] [--arch A] [--jobs N] [--json]\n"
   "              [--dim D,D.. --seq A:B:xF --dtype T,T.. --causal both [--shard I/N]]",
   "The main job: generates every variant of the default space for the problem and the\n"
   "target (or the one --variant or --config names), compiles it, runs it and\n"
   "validates it against naive attention; on a GPU it times it. With no GPU it runs\n"
   "on the CPU emulator at a small sequence length (--emu-seq) and counts memory\n"
   "traffic: emulator figures, not GPU performance. Without --dtype it tunes the dtype\n"
   "the target's families default to (bf16 where it has bf16 tensor cores, else fp32).\n"
   "Lists in --dim, --seq and --dtype (and --causal both) make a sweep: every key of\n"
   "their product, one after another, each recorded as it finishes (a rerun resumes);\n"
   "--shard I/N runs the I-th of N disjoint parts of the keys, balanced by estimated cost.",
   "fatune --dim 64 --seq 4096",
   "tune every variant for a problem (no command)"},
  {"run", CMD_RUN, F_TYPE | F_MOD | F_SCALE | F_ARCH | F_PICK | F_BACKEND | F_IO | F_OUT | F_SCHED |
                   F_JOBS | F_OP,
   "(--variant NAME | --config 'k=v,...') --q Q.npy --k K.npy --v V.npy --out O.npy\n"
   "                  [--lse LSE.npy] [--causal] [--scale S] [--dtype T] [--backend B]\n"
   "       fatune run --op bwd (--variant NAME | --config 'k=v,...') --q Q.npy --k K.npy\n"
   "                  --v V.npy --do DO.npy [--o O.npy --lse LSE.npy] --dq DQ.npy\n"
   "                  --dk DK.npy --dv DV.npy [--causal] [--scale S] [--dtype T]",
   "Runs one variant on tensors from .npy files (float16, bfloat16, float32 or float64,\n"
   "shape (N, D) or (B, H, N, D)) and writes O in the kernel's dtype. The dtype is\n"
   "the inputs' unless --dtype says otherwise. bfloat16 is read and written as\n"
   "np.save writes an ml_dtypes.bfloat16 array (descr '<V2'): in NumPy,\n"
   "np.load('o.npy').view(ml_dtypes.bfloat16). A 1-byte void ('<V1' as np.save\n"
   "writes an ml_dtypes.float8_e4m3fn array, or '|V1') is read as e4m3: the fp8\n"
   "forward pass (--arch sm_90a), its O written as bfloat16. With --op bwd it runs\n"
   "a backward variant on dO and the forward pass's O and lse (or runs the forward\n"
   "pass's default variant first, without them) and writes dQ, dK and dV.",
   "fatune run --config block_m=64 --q q.npy --k k.npy --v v.npy --out o.npy",
   "run one variant on .npy tensors"},
  {"list", CMD_LIST, F_DIM | F_TYPE | F_MOD | F_SEQ | F_ARCH | F_JSON | F_SPACE | F_OP | F_VARLEN,
   "--dim D [--dtype T] [--causal] [--op OP] [--arch A] [--space default|full] [--json]",
   "Lists the variants of the space: name, config and hash.",
   "fatune list --dim 128 --dtype fp16 --arch sm_80",
   "list the variants of the space"},
  {"gen", CMD_GEN, F_DIM | F_TYPE | F_MOD | F_ARCH | F_PICK | F_OP | F_VARLEN,
   "(--variant NAME | --config 'k=v,...') [--dim D] [--dtype T] [--causal] [--op OP] [--arch A]",
   "Prints one variant's CUDA source. Keys left out of --config take the family's\n"
   "defaults, or values that fit the keys given (it says which).",
   "fatune gen --config block_m=64,block_n=32 --dtype fp32",
   "print a variant's CUDA source"},
  {"compile", CMD_COMPILE, F_DIM | F_TYPE | F_MOD | F_SEQ | F_ARCH | F_JOBS | F_JSON | F_SPACE | F_PICK | F_VARLEN |
                           F_SASS | F_GPU | F_SAVE | F_OP,
   "--dim D [--dtype T] [--causal] [--op OP] [--arch A] [--space S] [--variant NAME | --config TEXT]\n"
   "                      [--sass [--gpu G]] [--save-cubin DIR] [--jobs N] [--json]",
   "Compiles every variant (or the one --variant or --config names) with NVRTC and\n"
   "prints registers, spills, shared memory and compile times. --sass disassembles\n"
   "each cubin with nvdisasm and counts the main loop's instructions per K/V block,\n"
   "with a static throughput estimate for a GPU.",
   "fatune compile --dim 64 --dtype bf16 --arch sm_80 --sass",
   "compile every variant, with the ptxas report"},
  {"sass", CMD_SASS, F_GPU | F_JSON | F_PICK | F_ARCH,
   "FILE.cubin [--config 'block_m=..,block_n=..,dim=..,warps=..'] [--smem BYTES] [--gpu G]",
   "Analyses the main loop of a cubin's SASS (anyone's, e.g. FlashAttention-2's) as\n"
   "compile --sass does; with the tile in --config, the throughput estimate too.",
   "fatune sass flash_fwd.cubin --config block_m=128,block_n=128,dim=64,warps=4",
   "the main loop of a cubin's machine code"},
  {"model", CMD_MODEL, F_DIM | F_TYPE | F_MOD | F_SEQ | F_GPU | F_JSON | F_PICK | F_ARCH | F_MODEL | F_OP |
                       F_VARLEN,
   "--gpu G --dim D --seq N[,N..] [--seq-k M] [--batch B] [--heads H] [--gqa G] [--causal]\n"
   "                    [--op OP] [--dtype T] ((--variant NAME | --config TEXT) [--cubin FILE] |\n"
   "                    --cubin FILE --launch fa2|fa3 [--kernel PART]) [--json] [--plot FILE.png]",
   "Predicts a kernel's time on a GPU with the timing model: an event-driven\n"
   "simulation of one SM issuing the kernel's own machine code (its main loop's SASS,\n"
   "stall counts and scoreboards, pipes, barriers, copies from L2) and of the CTAs'\n"
   "waves over the SMs. Prints the time, TFLOP/s, what bounds it, the clocks per\n"
   "K/V block and the main loop's instructions; --plot draws one steady iteration\n"
   "per warp role. A fatune variant is compiled for the GPU, or read from the cubin\n"
   "compile --save-cubin wrote (--cubin); --cubin with --launch takes anyone's\n"
   "(FlashAttention-2's or -3's), with the launch that runs it. A list of --seq\n"
   "predicts the one kernel at each length (--json: a list). Batch and heads default\n"
   "to 16k tokens and 2048 channels in all, as the FlashAttention papers measure.\n"
   "--op bwd models the backward pass: its main kernel (dK, dV, and dQ's atomic adds)\n"
   "simulated, with dq=separate the dQ kernel after it, its other launches at DRAM\n"
   "speed, TFLOP/s at 2.5 times the forward's FLOPs; --launch fa2 takes\n"
   "FlashAttention-2's flash_bwd kernels, --launch fa3 FlashAttention-3's. --gqa G\n"
   "shares each K/V head among G query heads: K and V cross DRAM once per group, and\n"
   "a kernel with a CTA per K/V head (fatune's backward) runs heads / G CTAs of G\n"
   "heads each; FlashAttention-2's backward sums dK and dV over the group after.\n"
   "--op decode predicts a variant at every number of splits from 1 to 128 beside\n"
   "FlashAttention-2's heuristic's; --launch fa2 takes FlashAttention-2's\n"
   "flash_fwd_splitkv kernel at its heuristic's splits.",
   "fatune model --gpu h100 --dim 128 --seq 4096 --cubin flash_fwd.cubin --launch fa2",
   "predict a kernel's time with the timing model"},
  {"best", CMD_BEST, F_DIM | F_TYPE | F_SEQ | F_DEV | F_DB | F_JSON | F_OP | F_BUDGET,
   "--dim D --seq N [--seq-k M] [--dtype T] [--causal] [--op OP] [--device NAME] [--db PATH]\n"
   "                   [--max-error E] [--deterministic] [--json]\n"
   "       fatune best --op decode --dim D --seq-k M [--batch B] [--gqa G] [--page P] ...\n"
   "       fatune best --op bwd --dim D --seq N [--gqa G] ...",
   "Prints the best recorded variant for a problem, or the nearest tuned seq (op\n"
   "decode: for its batch, GQA ratio and page size exactly; op bwd: for its GQA\n"
   "ratio). With\n"
   "--max-error, the best whose norm-relative error on the main case and on every\n"
   "case of the adversarial suite is E or less (a variant not run on the suite, or\n"
   "failing a case of it, is passed over); with --deterministic, the best that gave\n"
   "the same bits on every run checked.",
   "fatune best --dim 64 --seq 4096 --dtype bf16",
   "the best recorded variant for a problem"},
  {"show", CMD_SHOW, F_DIM | F_TYPE | F_SEQ | F_DEV | F_DB | F_JSON | F_OP,
   "[--dim D] [--dtype T] [--causal] [--op OP] [--seq N] [--device NAME] [--db PATH] [--json]\n"
   "                   [--batch B] [--gqa G] [--page P]",
   "Lists the recorded trials that match the flags given.",
   "fatune show --dim 64 --seq 4096",
   "the recorded trials"},
  {"export", CMD_EXPORT, F_FMT | F_DB, "--format csv|json [--db PATH]",
   "Prints every recorded trial as CSV or JSON.",
   "fatune export --format csv > trials.csv",
   "every trial as CSV or JSON"},
  {"merge", CMD_MERGE, F_DB, "OTHER.db... [--db PATH]",
   "Brings other databases' devices, variants and trials in, one after another, without\n"
   "duplicates (never their compiled binaries), and says per database what it added,\n"
   "replaced and skipped. A key measured in two (shards that overlap) keeps both trials\n"
   "when two devices measured it, else the one recorded last.",
   "fatune merge shard-*.db --db team.db",
   "bring in another database's results"},
  {"explore", CMD_EXPLORE, F_DIM | F_TYPE | F_SEQ | F_SCALE | F_ARCH | F_JOBS | F_JSON |
                           F_BACKEND | F_EMU | F_SEED | F_WORK | F_DB | F_AXIS | F_OP | F_GPU,
   "--dim D (--seq N | --sweep seq=A:B) [--axis A] [--op OP] [problem flags] [--backend B]\n"
   "                      [--gpu G] [--db PATH] [--json]",
   "Runs matched variants that differ in one design axis (FlashAttention-1 against -2)\n"
   "and shows what each costs, measured and predicted by the cost model, for the\n"
   "families that declare explore axes (the op, the dtype and --arch choose which:\n"
   "--op bwd explores the backward pass in fp32 and fp64; fp16 and bf16 off sm_90a,\n"
   "tc's precision), with each variant's error and the timing model's TFLOP/s on\n"
   "--gpu's GPU (default: the arch's).",
   "fatune explore --dim 64 --seq 512 --axis norm",
   "FlashAttention-1 against -2, one axis at a time"},
  {"baseline", CMD_BASELINE, F_DB, "FILE.csv [--db PATH]",
   "Records PyTorch's attention timed on a GPU, for the report to draw fatune's\n"
   "TFLOP/s beside it. FILE.csv has the header\n"
   "  gpu,backend,dtype,batch,heads,seq_q,seq_k,dim,causal,median_us,torch\n"
   "and a row per measurement: gpu the device's name as the driver gives it\n"
   "(torch.cuda.get_device_name()), backend a name such as sdpa-flash, median_us\n"
   "the median time of one call. TFLOP/s are counted as fatune counts its own.\n"
   "scripts/gpu-check.sh writes such a file and records it.",
   "fatune baseline sdpa.csv",
   "record PyTorch's attention times beside fatune's"},
  {"report", CMD_REPORT, F_OUT | F_FMT | F_DB, "[--out DIR] [--format html|md] [--db PATH]",
   "Renders the database into HTML or Markdown with gnuplot plots.",
   "fatune report --out fatune-report",
   "the database as HTML or Markdown with plots"},
  {"help", CMD_HELP, 0, "[COMMAND]", "Prints the help of fatune, or of one command.",
   "fatune help run",
   "help on fatune or a command"},
  {"version", CMD_VERSION, 0, "", "Prints fatune's version.", "fatune version",
   "fatune's version"},
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

typedef struct flag_info {
  const char *name;     /* without the leading dashes */
  int group;
  int takes_value;      /* 1: a value; 2: a value only as --flag=VALUE (--causal=both) */
  const char *meta;     /* the value's name in help */
  const char *help;
} flag_info;

static const flag_info flags[] = {
  {"dim", F_DIM, 1, "D", "head dimension, 1 to 576 (default 64); the main job: a list,\n"
                          "64,128"},
  {"dim-v", F_DIM, 1, "DV", "V's and O's head dimension when not --dim's, 1 to 576:\n"
                            "--dim 192 --dim-v 128 (DeepSeek's); every --dim of a list takes it"},
  {"dtype", F_TYPE, 1, "T", "fp32, fp64, fp16, bf16 or e4m3 (fp8: O in bf16), or half,\n"
                            "bfloat16, ... (default: the target's, as the banner says);\n"
                            "the main job: a list"},
  {"causal", F_TYPE, 2, "=both", "causal mask, aligned to the bottom-right corner; the main\n"
                                "job's --causal both: each key without and with it"},
  {"descale-rows", F_TYPE, 1, "R", "--dtype e4m3: a descale per block of R rows of each head\n"
                                  "(R a power of two from 64: q's (batch, heads, seq_q / R),\n"
                                  "k's and v's (batch, kv heads, seq_k / R)) instead of one per\n"
                                  "(batch, K/V head); each variant's blockscale form"},
  {"mod", F_MOD, 1, "SPEC", "a score or mask modification: window=LEFT[:RIGHT], softcap=CAP,\n"
                          "alibi, prefixlm=N, chunked=N, causal[=1] (1: top-left),\n"
                          "document, relbias=SPAN (over tensors: random when tuning),\n"
                          "or a file NAME.lua (README)"},
  {"varlen", F_VARLEN, 0, NULL, "variable-length batches (packed sequences, as the library's\n"
                               "fatune_attention_varlen and _varlen_backward run them): each\n"
                               "variant's varlen form (--op fwd or bwd)"},
  {"paged", F_VARLEN, 0, NULL, "K and V read from a KV cache through a block table (as the\n"
                              "library's fatune_attention_kvcache runs many new tokens): each\n"
                              "variant's paged form (--op fwd)"},
  {"seq-lens", F_VARLEN, 1, "L,L..", "a variable-length batch of these sequences (queries and\n"
                                   "keys; the batch is their number, --seq their longest): --varlen"},
  {"op", F_OP, 1, "OP", "the operation: fwd (the forward pass, the default), bwd (the\n"
                        "backward pass) or decode (split-KV decoding)"},
  {"seq", F_SEQ, 1, "N", "query sequence length (default 4096); the main job: a list of\n"
                        "lengths and ranges A:B:xF (A, A*F, ... up to B) or A:B:+S"},
  {"seq-k", F_SEQ, 1, "M", "key/value sequence length (default: --seq); --op decode: the\n"
                          "KV cache's keys per sequence (default 4096), a list"},
  {"batch", F_SEQ, 1, "B", "batch size (default 4); --op decode: a list"},
  {"gqa", F_SEQ, 1, "G", "query heads per K/V head (default 1): --op decode (there a\n"
                         "list) and --op bwd, keyed apart in the database, and fatune\n"
                         "model's forward and backward passes"},
  {"kv-lens", F_SEQ, 1, "L,L..", "--op decode: each sequence's keys (the batch is their\n"
                               "number, --seq-k their largest): a skewed batch"},
  {"page", F_SEQ, 1, "P", "--op decode: tokens per page of the KV cache (default: none,\n"
                         "a contiguous cache), a list"},
  {"heads", F_SEQ, 1, "H", "heads (default 16)"},
  {"workload", F_WORKLOAD, 1, "FILE", "--op decode: a recorded workload, a decode step per line\n"
                                     "(each sequence's cached keys, comma-separated): each batch\n"
                                     "and longest length, rounded up to powers of two, a key"},
  {"scale", F_SCALE, 1, "S", "softmax scale (default 1/sqrt(dim))"},
  {"arch", F_ARCH, 1, "A", "sm_ and a compute capability, e.g. sm_80 (default: the\n"
                           "GPU's, else the space's default)"},
  {"smem", F_ARCH, 1, "BYTES", "shared memory per block (default: the arch's opt-in maximum)"},
  {"jobs", F_JOBS, 1, "N", "work on N threads (default: all cores)"},
  {"json", F_JSON, 0, NULL, "print JSON instead of a table"},
  {"space", F_SPACE, 1, "S", "default (worth timing) or full (the whole cross product)"},
  {"variant", F_PICK, 1, "NAME", "a variant by its name (fatune list prints them)"},
  {"config", F_PICK, 1, "TEXT", "a variant by its config, e.g. 'block_m=64,block_n=32'"},
  {"backend", F_BACKEND, 1, "B", "auto (the GPU if there is one, else the emulator), cuda or emu"},
  {"emu-seq", F_EMU, 1, "N", "on the emulator, run at most N queries and keys (default\n"
                             "256; explore, which runs a few variants at one head, 2048)"},
  {"seed", F_SEED, 1, "S", "seed of the random inputs (default: from the clock; always printed)"},
  {"schedule", F_SCHED, 1, "S", "emulator thread order: forward, reverse, random or\n"
                                "skew (default forward)"},
  {"timeout", F_WORK, 1, "S", "a variant that runs longer is stopped, recorded as\n"
                              "timeout (default 60)"},
  {"trial-ms", F_WORK, 1, "N", "GPU timing budget per variant, in milliseconds (default 300)"},
  {"retune", F_RETUNE, 0, NULL, "measure again what the database already holds"},
  {"shard", F_SHARD, 1, "I/N", "the I-th of N disjoint parts of a sweep's keys, balanced by\n"
                               "estimated cost (deterministic: N machines share a sweep)"},
  {"device", F_DEV, 1, "NAME", "a device's name, UUID or part of its name"},
  {"max-error", F_BUDGET, 1, "E", "best: the error budget, a norm-relative error from 1e-16 to 1"},
  {"deterministic", F_BUDGET, 0, NULL, "best: only variants that gave the same bits every run"},
  {"format", F_FMT, 1, "F", "export: csv or json; report: html (default) or md"},
  {"axis", F_AXIS, 1, "A", "one design axis of the explored family (it refuses the\n"
                          "others), or all (default), or quant: fp8's rounding against\n"
                          "float64, a scale per head or per block of 64 rows, with and\n"
                          "without a Hadamard rotation; the families'"},
  {"sweep", F_AXIS, 1, "seq=A:B", "seq A, 2A, 4A, ... up to B instead of --seq"},
  {"db", F_DB, 1, "PATH", "results database (default: $FATUNE_DB, else\n"
                          "~/.cache/fatune/fatune.db)"},
  {"q", F_IO, 1, "Q.npy", "queries"},
  {"k", F_IO, 1, "K.npy", "keys"},
  {"v", F_IO, 1, "V.npy", "values"},
  {"out", F_OUT, 1, "PATH", "run: the output .npy; report: the directory to write\n"
                            "(default fatune-report)"},
  {"lse", F_IO, 1, "LSE.npy", "also write the logsumexp, float32 of shape (N,) or (B, H, N);\n"
                            "--op bwd: the forward pass's, read with --o"},
  {"do", F_IO, 1, "DO.npy", "--op bwd: the gradient of the output, shaped as Q"},
  {"o", F_IO, 1, "O.npy", "--op bwd: the forward pass's output (with --lse; without\n"
                         "both, run runs the forward pass first)"},
  {"dq", F_IO, 1, "DQ.npy", "--op bwd: where dQ goes"},
  {"dk", F_IO, 1, "DK.npy", "--op bwd: where dK goes"},
  {"dv", F_IO, 1, "DV.npy", "--op bwd: where dV goes"},
  {"sass", F_SASS, 0, NULL, "disassemble each cubin with nvdisasm and count the main\n"
                            "loop's instructions per K/V block, with a throughput estimate"},
  {"cubin", F_MODEL, 1, "FILE", "model: a cubin to predict (anyone's)"},
  {"launch", F_MODEL, 1, "L", "model: how the cubin is launched: fa2 or fa3 (their launch code)"},
  {"kernel", F_MODEL, 1, "PART", "model: the cubin's function whose name holds PART (default:\n"
                                 "the one the launch runs for the problem)"},
  {"plot", F_MODEL, 1, "FILE.png", "model: draw one steady iteration per warp role (gnuplot)"},
  {"red-lines", F_MODEL, 1, "N", "model: the 128-byte lines each warp's global atomic add\n"
                               "touches, 1 to 64 (default: as the variant's family lays its\n"
                               "adds out; a coalesced warp's for --launch): for a cubin the\n"
                               "family laid out otherwise, which the machine code does not show"},
  {"save-cubin", F_SAVE, 1, "DIR", "write each variant's cubin to DIR/<variant name>.cubin"},
  {"gpu", F_GPU, 1, "G", "the model's GPU: a100, h100, h200, a10, rtx3090, l40s, l4,\n"
                         "rtx4090, rtx5090 or t4 (default: the device's, else the arch's:\n"
                         "sm_75 t4, sm_80 a100, sm_86 a10, sm_89 l40s, sm_90 h100, sm_120\n"
                         "rtx5090)"},
};
#define NFLAGS (sizeof flags / sizeof flags[0])

/* getopt_long's values: a flag's is OPT_FLAG plus its index in flags[],
** clear of the ':' and '?' getopt returns for a missing value and an
** unknown option (indices 58 and 63 would be taken for them). */
enum { OPT_HELP = 'h', OPT_VERSION = 1000, OPT_FLAG = 2000 };

int cli_say(int rc, const char *msg) {
  char line[320];
  size_t n = 0;
  for (; msg[n] && n < sizeof line - 4; n++)
    line[n] = (unsigned char)msg[n] < 0x20 || msg[n] == 0x7f ? '?' : msg[n];
  if (msg[n]) memcpy(line + n, "...", 3), n += 3;
  line[n] = '\0';
  fprintf(stderr, "fatune: %s\n", line);
  return rc;
}

static int fail(char *err, size_t n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, n, fmt, ap);
  va_end(ap);
  return -1;
}

/* The edit distance of a and b (case-insensitive), capped at 9. */
static int distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 40 || lb > 40) return 9;
  int d[41][41];
  for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= la; i++)
    for (size_t j = 1; j <= lb; j++) {
      const int same = tolower((unsigned char)a[i - 1]) == tolower((unsigned char)b[j - 1]);
      int sub = d[i - 1][j - 1] + !same;
      int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
      int best = sub < del ? sub : del;
      best = best < ins ? best : ins;
      /* a swap of two neighbours counts as one edit (dtpye, dtype) */
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
          d[i - 2][j - 2] + 1 < best)
        best = d[i - 2][j - 2] + 1;
      d[i][j] = best;
    }
  return d[la][lb] < 9 ? d[la][lb] : 9;
}

/* "; did you mean X?" for the nearest of n names (stride bytes apart,
** each a const char * at the start), when it is near enough; else "". */
static const char *nearest(const char *s, const void *names, size_t n, size_t stride,
                           const char *prefix, char *buf, size_t len) {
  const char *best = NULL;
  int bd = 9;
  for (size_t i = 0; i < n; i++) {
    const char *name = *(const char *const *)((const char *)names + i * stride);
    if (!name) continue;
    int dd = distance(s, name);
    if (dd < bd) bd = dd, best = name;
  }
  size_t sl = strlen(s);
  if (!best || bd > (sl > 5 ? 2 : sl > 2) + (sl > 9)) return "";
  snprintf(buf, len, "; did you mean %s%s?", prefix, best);
  return buf;
}

/* A whole decimal integer in [lo, hi]. */
static int parse_int(const char *flag, const char *s, long lo, long hi, int *out,
                     char *err, size_t n) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  int sign_or_digit = *s == '-' || isdigit((unsigned char)*s);
  if (errno || end == s || *end != '\0' || !sign_or_digit || v < lo || v > hi) {
    snprintf(err, n, "%s must be an integer from %ld to %ld, not '%s'", flag, lo, hi, s);
    return -1;
  }
  *out = (int)v;
  return 0;
}

static int parse_seed(const char *s, cli_opts *o, char *err, size_t n) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno || end == s || *end != '\0' || !isdigit((unsigned char)*s))
    return fail(err, n, "--seed must be a non-negative integer, not '%s'", s);
  o->seed = v, o->seed_given = 1;
  return 0;
}

static int parse_scale(const char *s, double *out, char *err, size_t n) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !(v > 0) || v > 1e6)
    return fail(err, n, "--scale must be a positive number up to 1e6, not '%s'", s);
  *out = v;
  return 0;
}

static int parse_budget(const char *s, double *out, char *err, size_t n) {
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end != '\0' || !(v >= 1e-16) || v > 1)
    return fail(err, n, "--max-error must be a norm-relative error from 1e-16 to 1, not '%s'", s);
  *out = v;
  return 0;
}

/* One whole decimal number of a list item at *s, moving *s past it; -1 if
** none or out of [1, hi]. */
static long list_number(const char **s, long hi) {
  if (!isdigit((unsigned char)**s)) return -1;
  char *end;
  errno = 0;
  long v = strtol(*s, &end, 10);
  *s = end;
  return errno || v < 1 || v > hi ? -1 : v;
}

/* Appends v to the list, which holds no repeats. */
static int list_add(const char *flag, int *vals, int *n, long v, char *err, size_t len) {
  for (int i = 0; i < *n; i++)
    if (vals[i] == v) return fail(err, len, "%s lists %ld twice", flag, v);
  if (*n == CLI_LIST_MAX)
    return fail(err, len, "%s lists more than %d values", flag, CLI_LIST_MAX);
  vals[(*n)++] = (int)v;
  return 0;
}

/* A comma-separated list of numbers in [1, hi], each item N, A:B:xF (A,
** A*F, ... up to B, F >= 2) or A:B:+S (A, A+S, ... up to B). */
static int parse_list(const char *flag, const char *text, long hi, int *vals, int *n,
                      char *err, size_t len) {
  *n = 0;
  for (const char *s = text;; s++) {
    const char *item = s;
    long a = list_number(&s, hi), b = a, step = 1;
    int times = 0;
    if (a > 0 && *s == ':') {
      s++;
      b = list_number(&s, hi);
      step = -1;
      if (*s == ':' && (s[1] == 'x' || s[1] == '+')) {
        times = s[1] == 'x';
        s += 2;
        step = list_number(&s, hi);
      }
      if (b < a || step < 1 + times) a = -1;
    }
    if (a < 1 || (*s != ',' && *s != '\0'))
      return fail(err, len, "%s must be an integer from 1 to %ld, or a range A:B:xF or A:B:+S, "
                  "or a comma-separated list of them, not '%.*s'", flag, hi,
                  (int)strcspn(item, ","), item);
    for (long v = a; v <= b; v = times ? v * step : v + step)
      if (list_add(flag, vals, n, v, err, len) != 0) return -1;
    if (*s == '\0') return 0;
  }
}

/* --kv-lens (each sequence's keys) and --seq-lens (its tokens): 0 to
** 2^24, repeats allowed, at most CLI_LIST_MAX of them. */
static int parse_lens(const char *flag, const char *text, int *vals, int *n, char *err,
                      size_t len) {
  *n = 0;
  for (const char *s = text;; s++) {
    const char *item = s;
    char *end;
    errno = 0;
    const long v = isdigit((unsigned char)*s) ? strtol(s, &end, 10) : -1;
    if (v >= 0) s = end;
    if (v < 0 || errno || v > 1 << 24 || (*s != ',' && *s != '\0'))
      return fail(err, len, "%s must be a comma-separated list of %s from 0 to %d, not '%.*s'",
                  flag, strcmp(flag, "--kv-lens") ? "lengths" : "key counts", 1 << 24,
                  (int)strcspn(item, ","), item);
    if (*n == CLI_LIST_MAX)
      return fail(err, len, "%s lists more than %d sequences", flag, CLI_LIST_MAX);
    vals[(*n)++] = (int)v;
    if (*s == '\0') return 0;
  }
}

/* I/N with 1 <= I <= N <= 4096. */
static int parse_shard(cli_opts *o, const char *s, char *err, size_t n) {
  const char *p = s;
  long i = list_number(&p, 4096), of = *p == '/' ? (p++, list_number(&p, 4096)) : -1;
  if (i < 1 || of < i || *p != '\0')
    return fail(err, n, "--shard must be I/N with 1 <= I <= N <= 4096, not '%s'", s);
  o->shard_i = (int)i, o->shard_n = (int)of;
  return 0;
}

/* export writes csv or json; report html or md. */
static int parse_format(cli_opts *o, const char *s, char *err, size_t n) {
  const int report = o->cmd == CMD_REPORT;
  const char *a = report ? "html" : "csv", *b = report ? "md" : "json";
  if (strcmp(s, a) && strcmp(s, b)) {
    const char *both[] = {a, b};
    char hint[64];
    return fail(err, n, "unknown format '%s' (%s or %s%s)", s, a, b,
                nearest(s, both, 2, sizeof both[0], "", hint, sizeof hint));
  }
  o->format = s;
  return 0;
}

/* Every family's explore axes as the space lists them (a generator opened
** for the purpose), then "all", into names and ptrs (MAX_AXES); their
** count, or -1 with why in err. */
#define MAX_AXES 32
static int explore_axes(gen_axis_name *names, const char **ptrs, char *err, size_t n) {
  gen_state *g;
  int count = 0;
  if (gen_open(&g, err, n) != 0) return -1;
  const int rc = gen_explore_axes(g, names, MAX_AXES - 2, &count);
  if (rc != 0) snprintf(err, n, "%s", gen_errmsg(g));
  gen_close(g);
  if (rc != 0) return -1;
  for (int i = 0; i < count; i++) ptrs[i] = names[i].name;
  ptrs[count] = "quant";   /* explore_quant.c: fp8's rounding, no family's axis */
  ptrs[count + 1] = "all";
  return count + 2;
}

/* "a, b, ... or all" of the count names in ptrs, into buf (n bytes). */
static void axis_list(const char *const *ptrs, int count, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  for (int i = 0; i < count && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%s", i == 0 ? "" : i + 1 < count ? ", " : " or ",
                           ptrs[i]);
}

/* An axis of any family's; explore checks that the family it runs has it. */
static int parse_axis(cli_opts *o, const char *s, char *err, size_t n) {
  gen_axis_name names[MAX_AXES];
  const char *axes[MAX_AXES];
  const int count = explore_axes(names, axes, err, n);
  if (count < 0) return -1;
  for (int i = 0; i < count; i++)
    if (!strcmp(s, axes[i])) {
      o->axis = s;
      return 0;
    }
  char list[512], hint[64];
  axis_list(axes, count, list, sizeof list);
  return fail(err, n, "unknown axis '%s' (%s%s)", s, list,
              nearest(s, axes, (size_t)count, sizeof axes[0], "", hint, sizeof hint));
}

/* A GPU the throughput estimate knows (estimate.c's table). */
static int parse_gpu(cli_opts *o, const char *s, char *err, size_t n) {
  if (!estimate_gpu_find(s))
    return fail(err, n, "unknown GPU '%s' (%s)", s, estimate_gpu_names());
  o->gpu = s;
  return 0;
}

/* seq=A:B, 1 <= A <= B. */
static int parse_sweep(cli_opts *o, const char *s, char *err, size_t n) {
  char *end = (char *)s;
  errno = 0;
  long a = strncmp(s, "seq=", 4) || !isdigit((unsigned char)s[4]) ? -1 : strtol(s + 4, &end, 10);
  long b = a >= 1 && *end == ':' && isdigit((unsigned char)end[1]) ? strtol(end + 1, &end, 10) : -1;
  if (errno || b < a || a < 1 || b > 1 << 24 || *end != '\0')
    return fail(err, n, "--sweep must be seq=A:B with 1 <= A <= B <= %d, not '%s'", 1 << 24, s);
  o->sweep_lo = (int)a, o->sweep_hi = (int)b;
  return 0;
}

/* fp32, fp64, fp16, bf16, e4m3 and their other names, in any case. */
static int parse_dtype(const char *s, fa_dtype *t, char *err, size_t n) {
  static const struct { const char *name; fa_dtype t; } names[] = {
    {"fp32", FA_FP32}, {"f32", FA_FP32}, {"float32", FA_FP32}, {"float", FA_FP32},
    {"fp64", FA_FP64}, {"f64", FA_FP64}, {"float64", FA_FP64}, {"double", FA_FP64},
    {"fp16", FA_FP16}, {"f16", FA_FP16}, {"float16", FA_FP16}, {"half", FA_FP16},
    {"bf16", FA_BF16}, {"bfloat16", FA_BF16},
    {"e4m3", FA_E4M3}, {"fp8", FA_E4M3}, {"float8_e4m3fn", FA_E4M3},
  };
  const size_t count = sizeof names / sizeof names[0];
  for (size_t i = 0; i < count; i++)
    if (!strcasecmp(s, names[i].name)) return *t = names[i].t, 0;
  char hint[64];
  return fail(err, n, "unknown dtype '%s' (fp32, fp64, fp16, bf16 or e4m3%s)", s,
              nearest(s, names, count, sizeof names[0], "", hint, sizeof hint));
}

/* A comma-separated list of dtypes, none twice. */
static int parse_dtypes(cli_opts *o, const char *text, char *err, size_t n) {
  o->ndtypes = 0;
  for (const char *s = text;; s++) {
    char one[32];
    const size_t len = strcspn(s, ",");
    snprintf(one, sizeof one, "%.*s", (int)(len < sizeof one ? len : sizeof one - 1), s);
    fa_dtype t = FA_FP32;
    if (len >= sizeof one) return fail(err, n, "unknown dtype '%.40s'", s);
    if (parse_dtype(one, &t, err, n) != 0) return -1;
    for (int i = 0; i < o->ndtypes; i++)
      if (o->dtypes[i] == t) return fail(err, n, "--dtype lists %s twice", fa_dtype_name(t));
    if (o->ndtypes == (int)(sizeof o->dtypes / sizeof o->dtypes[0]))
      return fail(err, n, "--dtype lists more than four dtypes");
    o->dtypes[o->ndtypes++] = t;
    s += len;
    if (*s == '\0') break;
  }
  o->problem.dtype = o->dtypes[0];
  return 0;
}

static int apply(cli_opts *o, const char *flag, const char *val, char *err, size_t n) {
  fa_problem *p = &o->problem;
  char hint[64];
  if (!strcmp(flag, "--dim") || !strcmp(flag, "--seq")) {
    const int dim = flag[2] == 'd';
    int *vals = dim ? o->dims : o->seqs, *count = dim ? &o->ndims : &o->nseqs;
    if (parse_list(flag, val, dim ? FA_DIM_MAX : 1 << 24, vals, count, err, n) != 0) return -1;
    *(dim ? &p->dim : &p->seq_q) = vals[0];
    return 0;
  }
  if (!strcmp(flag, "--shard")) return parse_shard(o, val, err, n);
  if (!strcmp(flag, "--kv-lens")) {
    if (parse_lens(flag, val, o->kv_lens, &o->nkv_lens, err, n) != 0) return -1;
    p->kv_lens = o->kv_lens;
    return 0;
  }
  if (!strcmp(flag, "--seq-lens")) {
    if (parse_lens(flag, val, o->seq_lens, &o->nseq_lens, err, n) != 0) return -1;
    p->q_lens = p->kv_lens = o->seq_lens, p->varlen = 1;
    return 0;
  }
  if (!strcmp(flag, "--seq-k") || !strcmp(flag, "--batch") || !strcmp(flag, "--gqa") ||
      !strcmp(flag, "--page")) {
    const char f = flag[2] == 's' ? 's' : flag[2];
    int *vals = f == 's' ? o->seqks : f == 'b' ? o->batches : f == 'g' ? o->gqas : o->pages;
    int *count = f == 's' ? &o->nseqks : f == 'b' ? &o->nbatches : f == 'g' ? &o->ngqas : &o->npages;
    int *dst = f == 's' ? &p->seq_k : f == 'b' ? &p->batch : f == 'g' ? &p->kv_group : &p->page;
    const long hi = f == 's' ? 1 << 24 : f == 'b' || f == 'p' ? 65535 : 1024;
    if (parse_list(flag, val, hi, vals, count, err, n) != 0) return -1;
    *dst = vals[0];
    return 0;
  }
  if (!strcmp(flag, "--dim-v")) return parse_int(flag, val, 1, FA_DIM_MAX, &p->dim_v, err, n);
  if (!strcmp(flag, "--descale-rows")) {
    if (parse_int(flag, val, 64, 1 << 24, &p->descale_rows, err, n)) return -1;
    if (p->descale_rows & (p->descale_rows - 1))
      return fail(err, n, "--descale-rows %d is no power of two (64, 128, 256, ...)", p->descale_rows);
    return 0;
  }
  if (!strcmp(flag, "--heads")) return parse_int(flag, val, 1, 65535, &p->heads, err, n);
  if (!strcmp(flag, "--smem")) return parse_int(flag, val, 1024, 1 << 20, &o->smem, err, n);
  if (!strcmp(flag, "--red-lines")) return parse_int(flag, val, 1, 64, &o->red_lines, err, n);
  if (!strcmp(flag, "--jobs")) return parse_int(flag, val, 1, 1024, &o->jobs, err, n);
  if (!strcmp(flag, "--timeout")) return parse_int(flag, val, 1, 86400, &o->timeout_s, err, n);
  if (!strcmp(flag, "--trial-ms")) return parse_int(flag, val, 1, 600000, &o->trial_ms, err, n);
  if (!strcmp(flag, "--emu-seq")) return parse_int(flag, val, 1, 1 << 24, &o->emu_seq, err, n);
  if (!strcmp(flag, "--seed")) return parse_seed(val, o, err, n);
  if (!strcmp(flag, "--scale")) return parse_scale(val, &p->scale, err, n);
  if (!strcmp(flag, "--max-error")) return parse_budget(val, &o->max_error, err, n);
  if (!strcmp(flag, "--causal") && val) {
    if (strcmp(val, "both")) return fail(err, n, "--causal takes no value, or =both, not '%s'", val);
    o->causal_both = 1, p->causal = 0;
  } else if (!strcmp(flag, "--causal")) p->causal = 1, o->causal_both = 0;
  else if (!strcmp(flag, "--json")) o->json = 1;
  else if (!strcmp(flag, "--arch")) o->arch = val;
  else if (!strcmp(flag, "--mod")) o->mod = val;
  else if (!strcmp(flag, "--variant")) o->variant = val;
  else if (!strcmp(flag, "--config")) o->config = val;
  else if (!strcmp(flag, "--retune")) o->retune = 1;
  else if (!strcmp(flag, "--varlen")) p->varlen = 1;
  else if (!strcmp(flag, "--paged")) p->paged = 1;
  else if (!strcmp(flag, "--workload")) o->workload = val;
  else if (!strcmp(flag, "--deterministic")) o->deterministic = 1;
  else if (!strcmp(flag, "--db")) o->db = val;
  else if (!strcmp(flag, "--device")) o->device = val;
  else if (!strcmp(flag, "--format")) return parse_format(o, val, err, n);
  else if (!strcmp(flag, "--axis")) return parse_axis(o, val, err, n);
  else if (!strcmp(flag, "--sweep")) return parse_sweep(o, val, err, n);
  else if (!strcmp(flag, "--q")) o->q = val;
  else if (!strcmp(flag, "--k")) o->k = val;
  else if (!strcmp(flag, "--v")) o->v = val;
  else if (!strcmp(flag, "--out")) o->out = val;
  else if (!strcmp(flag, "--lse")) o->lse = val;
  else if (!strcmp(flag, "--do")) o->dout = val;
  else if (!strcmp(flag, "--o")) o->o_in = val;
  else if (!strcmp(flag, "--dq")) o->dq = val;
  else if (!strcmp(flag, "--dk")) o->dk = val;
  else if (!strcmp(flag, "--dv")) o->dv = val;
  else if (!strcmp(flag, "--sass")) o->sass = 1;
  else if (!strcmp(flag, "--save-cubin")) o->save_cubin = val;
  else if (!strcmp(flag, "--cubin")) o->cubin = val;
  else if (!strcmp(flag, "--kernel")) o->kernel = val;
  else if (!strcmp(flag, "--plot")) o->plot = val;
  else if (!strcmp(flag, "--launch")) {
    if (strcmp(val, "fa2") && strcmp(val, "fa3"))
      return fail(err, n, "unknown launch '%s' (fa2 or fa3)", val);
    o->launch = val;
  }
  else if (!strcmp(flag, "--gpu")) return parse_gpu(o, val, err, n);
  else if (!strcmp(flag, "--backend")) {
    static const char *const backends[] = {"auto", "emu", "cuda"};
    if (strcmp(val, "auto") && strcmp(val, "emu") && strcmp(val, "cuda"))
      return fail(err, n, "unknown backend '%s' (auto, emu or cuda%s)", val,
                  nearest(val, backends, 3, sizeof backends[0], "", hint, sizeof hint));
    o->backend = val;
  } else if (!strcmp(flag, "--schedule")) {
    static const char *const order[] = {"forward", "reverse", "random", "skew"};
    if (backend_schedule_parse(val, &o->schedule) != 0)
      return fail(err, n, "unknown schedule '%s' (forward, reverse, random or skew%s)", val,
                  nearest(val, order, 4, sizeof order[0], "", hint, sizeof hint));
  }
  else if (!strcmp(flag, "--dtype")) return parse_dtypes(o, val, err, n);
  else if (!strcmp(flag, "--op")) {
    static const char *const ops[] = {"fwd", "bwd", "decode"};
    if (fa_op_parse(val, &p->op) != 0)
      return fail(err, n, "unknown op '%s' (fwd, bwd or decode%s)", val,
                  nearest(val, ops, 3, sizeof ops[0], "", hint, sizeof hint));
  }
  else if (!strcmp(flag, "--space")) {
    static const char *const spaces[] = {"default", "full"};
    if (strcmp(val, "default") && strcmp(val, "full"))
      return fail(err, n, "unknown space '%s' (default or full%s)", val,
                  nearest(val, spaces, 2, sizeof spaces[0], "", hint, sizeof hint));
    o->space = val;
  }
  return 0;
}

static void defaults(cli_opts *o) {
  memset(o, 0, sizeof *o);
  o->cmd = CMD_TUNE;
  o->problem.dim = 64;
  o->problem.dtype = FA_FP32;
  o->problem.seq_q = 4096;
  o->problem.batch = 4;
  o->problem.heads = 16;
  o->space = "default";
  o->backend = "auto";
  o->emu_seq = 256;
  o->timeout_s = 60;
  o->trial_ms = 300;
  o->schedule = FA_SCHED_FORWARD;
  o->axis = "all";
}

_Static_assert(NFLAGS <= 64, "cli_opts.given has a bit per flag");

int cli_given(const cli_opts *o, const char *flag) {
  for (size_t i = 0; i < NFLAGS; i++)
    if (!strcmp(flags[i].name, flag + 2)) return (o->given >> i) & 1;
  return 0;
}

static const cmd_info *find_command(const char *name) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].name && !strcmp(commands[i].name, name)) return &commands[i];
  return NULL;
}

static const char *command_name(cli_cmd cmd) {
  for (size_t i = 0; i < NCOMMANDS; i++)
    if (commands[i].cmd == cmd && commands[i].name) return commands[i].name;
  return "";
}

static const flag_info *find_flag(const char *name, size_t len) {
  for (size_t i = 0; i < NFLAGS; i++)
    if (strlen(flags[i].name) == len && !strncmp(flags[i].name, name, len)) return &flags[i];
  return NULL;
}

/* The command: the first word that is neither an option nor an option's
** value, so options may come before it. NULL: the main job. */
static const char *command_word(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--")) return i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-' || !a[1]) return a;
    if (a[1] != '-') continue;   /* -h */
    const char *eq = strchr(a + 2, '=');
    const flag_info *f = find_flag(a + 2, eq ? (size_t)(eq - a - 2) : strlen(a + 2));
    if (!f) return NULL;   /* getopt_long names the unknown option */
    if (f->takes_value == 1 && !eq) i++;
  }
  return NULL;
}

static int unknown_option(const char *a, char *err, size_t n) {
  char name[64], hint[80];
  const char *eq = strchr(a, '=');
  snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - a) : (int)strlen(a), a);
  const char *bare = name[0] == '-' ? name + (name[1] == '-' ? 2 : 1) : name;
  return fail(err, n, "unknown option '%s'%s (see fatune --help)", name,
              nearest(bare, flags, NFLAGS, sizeof flags[0], "--", hint, sizeof hint));
}

/* The options, in getopt_long's form: every flag of the table. */
static void long_options(struct option *lo) {
  for (size_t i = 0; i < NFLAGS; i++)
    lo[i] = (struct option){flags[i].name,
                            flags[i].takes_value == 2 ? optional_argument
                            : flags[i].takes_value    ? required_argument
                                                      : no_argument,
                            NULL, OPT_FLAG + (int)i};
  lo[NFLAGS] = (struct option){"help", no_argument, NULL, OPT_HELP};
  lo[NFLAGS + 1] = (struct option){"version", no_argument, NULL, OPT_VERSION};
  lo[NFLAGS + 2] = (struct option){NULL, 0, NULL, 0};
}

/* Positional words after the command: merge's paths (gathered in argv
** from slot first on, in their order), sass's cubin, help's command. */
static int positional(cli_opts *o, char **argv, int first, int i, char *err, size_t n) {
  const char *a = argv[i];
  if (o->cmd == CMD_MERGE && a[0] != '-') {
    argv[first + o->nmerge] = argv[i];
    o->merge_paths = argv + first;
    o->merge_path = argv[first];
    return o->nmerge++, 0;
  }
  if ((o->cmd == CMD_SASS || o->cmd == CMD_BASELINE) && !o->merge_path)
    return o->merge_path = a, 0;
  if (o->cmd == CMD_HELP && !o->help_cmd) {
    const cmd_info *c = find_command(a);
    char hint[64];
    if (!c)
      return fail(err, n, "no command '%s' to help with%s (see fatune help)", a,
                  nearest(a, commands, NCOMMANDS, sizeof commands[0], "", hint, sizeof hint));
    o->help_cmd = c->name;
    return 0;
  }
  if (a[0] == '-') return unknown_option(a, err, n);
  return fail(err, n, "unexpected argument '%s' (see fatune help%s%s)", a,
              command_name(o->cmd)[0] ? " " : "", command_name(o->cmd));
}

/* Lists of keys belong to the main job, which runs each key on its own. */
static int check_sweep(const cli_opts *o, char *err, size_t errlen) {
  const int keys = o->ndims > 1 || o->nseqs > 1 || o->ndtypes > 1 || o->causal_both;
  /* the model predicts one compiled kernel at several lengths */
  const int seq_list = o->cmd == CMD_MODEL && o->ndims <= 1 && o->ndtypes <= 1 && !o->causal_both;
  if (keys && o->cmd != CMD_TUNE && !seq_list)
    return fail(err, errlen, "fatune %s takes one --dim, --seq and --dtype, and --causal "
                "without =both; lists are for the main job's sweeps%s", command_name(o->cmd),
                o->cmd == CMD_MODEL ? " (the model takes a list of --seq)" : "");
  const int decode_lists = o->nseqks > 1 || o->nbatches > 1 || o->ngqas > 1 || o->npages > 1;
  if (decode_lists && (o->problem.op != FA_OP_DECODE || o->cmd != CMD_TUNE))
    return fail(err, errlen, "lists of --seq-k, --batch, --gqa and --page are the main job's "
                "sweeps of --op decode");
  /* the backward pass keys by the GQA ratio (not explore, whose problems are its own) */
  const int bwd_gqa = o->problem.op == FA_OP_BWD && o->cmd != CMD_EXPLORE;
  if (o->problem.op != FA_OP_DECODE &&
      (o->npages || (o->ngqas && o->cmd != CMD_MODEL && !bwd_gqa)))
    return fail(err, errlen, "--%s is --op decode's%s: %s", o->npages ? "page" : "gqa",
                o->npages ? "" : ", --op bwd's (but explore's) and fatune model's", o->npages
                ? "the KV cache's page size"
                : o->problem.op == FA_OP_BWD ? "explore's problems are its own"
                : "the forward pass tunes each query head with its own K/V head");
  if (o->nseqs > 1 && o->problem.op == FA_OP_DECODE)
    return fail(err, errlen, "--op decode takes one --seq (the new tokens of each sequence); "
                "--seq-k lists the cache's lengths");
  if (o->nseqs > 1 && cli_given(o, "--seq-k"))
    return fail(err, errlen, "--seq-k takes one --seq; a sweep over --seq tunes seq_k = seq_q");
  if ((keys || o->shard_n) && o->json && !seq_list)
    return fail(err, errlen, "--json takes one key; fatune export --format json gives a sweep's");
  if (o->problem.varlen && o->problem.op != FA_OP_FWD && o->problem.op != FA_OP_BWD)
    return fail(err, errlen, "--varlen is the forward and backward passes'");
  if (o->problem.paged && (o->problem.op != FA_OP_FWD || o->problem.varlen))
    return fail(err, errlen, "--paged is the forward pass's, without --varlen");
  if (o->problem.descale_rows) {
    /* a variant named takes its dtype from its name */
    const int named = !cli_given(o, "--dtype") && (o->variant || o->config);
    for (int i = 0; !named && i < (o->ndtypes ? o->ndtypes : 1); i++)
      if ((o->ndtypes ? o->dtypes[i] : o->problem.dtype) != FA_E4M3)
        return fail(err, errlen, "--descale-rows scales fp8 inputs: it takes --dtype e4m3");
    if (o->problem.op != FA_OP_FWD || o->problem.varlen || o->problem.paged)
      return fail(err, errlen, "--descale-rows is the dense forward pass's (fp8 has no "
                  "backward pass, variable-length or KV cache form yet)");
    if (o->cmd == CMD_RUN)
      return fail(err, errlen, "fatune run takes no descales (all 1), so --descale-rows has "
                  "nothing to scale; the library and fatune.attention take them");
  }
  if (o->cmd == CMD_TUNE && o->variant && o->config)
    return fail(err, errlen, "the main job takes --variant NAME or --config TEXT, not both");
  return 0;
}

/* Decoding's defaults: one new token over 4096 cached keys. */
static void decode_defaults(cli_opts *o) {
  fa_problem *p = &o->problem;
  if (p->op != FA_OP_DECODE) return;
  if (!cli_given(o, "--seq")) p->seq_q = 1, o->seqs[0] = 1;
  if (!cli_given(o, "--seq-k")) p->seq_k = 4096;
}

/* --kv-lens: the batch and the cache's capacity from the lengths. */
static int check_kv_lens(cli_opts *o, char *err, size_t errlen) {
  if (!o->nkv_lens) return 0;
  if (o->problem.op != FA_OP_DECODE)
    return fail(err, errlen, "--kv-lens is --op decode's: the cached keys of each sequence");
  if (cli_given(o, "--batch") || cli_given(o, "--seq-k"))
    return fail(err, errlen, "--kv-lens sets the batch (their number) and --seq-k (the largest)");
  o->problem.batch = o->nkv_lens;
  o->problem.seq_k = 1;
  for (int i = 0; i < o->nkv_lens; i++)
    if (o->kv_lens[i] > o->problem.seq_k) o->problem.seq_k = o->kv_lens[i];
  return 0;
}

/* --workload: its keys, which replace --batch and --seq-k. */
static int check_workload(cli_opts *o, char *err, size_t errlen) {
  if (!o->workload) return 0;
  if (o->problem.op != FA_OP_DECODE)
    return fail(err, errlen, "--workload is --op decode's: a recorded workload of decode steps");
  if (cli_given(o, "--batch") || cli_given(o, "--seq-k") || o->nkv_lens)
    return fail(err, errlen, "--workload sets the batches and the cache's lengths (not --batch, "
                "--seq-k or --kv-lens)");
  if (wl_read(o->workload, o->wl_keys, &o->nwl_keys, &o->wl_steps, err, errlen) != 0) return -1;
  o->problem.batch = o->wl_keys[0].batch, o->problem.seq_k = o->wl_keys[0].seq_k;
  return 0;
}

/* --seq-lens: a variable-length batch, its number the batch and its
** longest --seq. */
static int check_seq_lens(cli_opts *o, char *err, size_t errlen) {
  if (!o->nseq_lens) return 0;
  if (cli_given(o, "--batch") || cli_given(o, "--seq") || cli_given(o, "--seq-k"))
    return fail(err, errlen, "--seq-lens sets the batch (their number) and --seq (the longest)");
  o->problem.batch = o->nseq_lens;
  o->problem.seq_q = 1;
  for (int i = 0; i < o->nseq_lens; i++)
    if (o->seq_lens[i] > o->problem.seq_q) o->problem.seq_q = o->seq_lens[i];
  o->problem.seq_k = o->seqs[0] = o->problem.seq_q;
  return 0;
}

/* Every --gqa divides every --heads. */
static int check_gqa(const cli_opts *o, char *err, size_t errlen) {
  for (int i = 0; i < o->ngqas; i++)
    if (o->problem.heads % o->gqas[i])
      return fail(err, errlen, "--gqa %d does not divide --heads %d", o->gqas[i],
                  o->problem.heads);
  return 0;
}

static int check_command(cli_opts *o, char *err, size_t errlen) {
  decode_defaults(o);
  if (check_kv_lens(o, err, errlen) != 0 || check_seq_lens(o, err, errlen) != 0 ||
      check_workload(o, err, errlen) != 0)
    return -1;
  if (o->problem.seq_k == 0) o->problem.seq_k = o->problem.seq_q;
  if (check_gqa(o, err, errlen) != 0) return -1;
  if (check_sweep(o, err, errlen) != 0) return -1;
  if ((o->cmd == CMD_GEN || o->cmd == CMD_RUN) && !!o->variant == !!o->config)
    return fail(err, errlen, "fatune %s needs exactly one of --variant NAME or --config TEXT",
                o->cmd == CMD_GEN ? "gen" : "run");
  if (o->cmd == CMD_COMPILE && o->variant && o->config)
    return fail(err, errlen, "fatune compile takes --variant NAME or --config TEXT, not both");
  if (o->cmd == CMD_SASS && !o->merge_path)
    return fail(err, errlen, "fatune sass needs the path of a cubin");
  if (o->cmd == CMD_BASELINE && !o->merge_path)
    return fail(err, errlen, "fatune baseline needs the path of a CSV file (see fatune help "
                "baseline)");
  if (o->cmd == CMD_RUN && o->problem.op == FA_OP_BWD) {
    if (!o->q || !o->k || !o->v || !o->dout || !o->dq || !o->dk || !o->dv)
      return fail(err, errlen, "fatune run --op bwd needs --q, --k, --v, --do, --dq, --dk and "
                  "--dv");
    if (o->out)
      return fail(err, errlen, "fatune run --op bwd writes --dq, --dk and --dv, not --out");
    if (!o->o_in != !o->lse)
      return fail(err, errlen, "fatune run --op bwd takes --o and --lse together (the forward "
                  "pass's), or neither, to run the forward pass first");
  } else if (o->cmd == CMD_RUN) {
    if (o->dout || o->o_in || o->dq || o->dk || o->dv)
      return fail(err, errlen, "--do, --o, --dq, --dk and --dv are the backward pass's: "
                  "give --op bwd");
    if (!o->q || !o->k || !o->v || !o->out)
      return fail(err, errlen, "fatune run needs --q, --k, --v and --out");
  }
  if (o->cmd == CMD_EXPLORE && o->sweep_lo && (cli_given(o, "--seq") || cli_given(o, "--seq-k")))
    return fail(err, errlen, "fatune explore takes --seq or --sweep, not both");
  return 0;
}

/* `--causal both`, as the issue of a sweep reads, is `--causal=both`:
** getopt_long takes an optional value only after '='. The pair becomes one
** word, in place; returns the new argc. */
static int join_causal_both(int argc, char **argv) {
  static char joined[] = "--causal=both";
  for (int i = 1; i + 1 < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--causal") && !strcmp(argv[i + 1], "both")) {
      argv[i] = joined;
      memmove(argv + i + 1, argv + i + 2, (size_t)(argc - i - 2) * sizeof *argv);
      argv[--argc] = NULL;
    }
  return argc;
}

int cli_parse(int argc, char **argv, cli_opts *o, char *err, size_t errlen) {
  defaults(o);
  argc = join_causal_both(argc, argv);
  const char *word = command_word(argc, argv);
  const cmd_info *cmd = &commands[0];
  if (word) {
    char hint[64];
    if (!(cmd = find_command(word)))
      return fail(err, errlen, "unknown command '%s'%s (see fatune --help)", word,
                  nearest(word, commands, NCOMMANDS, sizeof commands[0], "", hint, sizeof hint));
  }
  o->cmd = cmd->cmd;
  struct option lo[NFLAGS + 3];
  long_options(lo);
  opterr = 0;
  optind = 0;   /* a fresh scan (glibc), so cli_parse may be called again */
  int c;
  while ((c = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
    const char *a = argv[optind - 1];
    if (c == OPT_HELP) o->help = 1;
    else if (c == OPT_VERSION) o->cmd = CMD_VERSION;
    else if (c == '?' && optopt) return unknown_option((char[3]){'-', (char)optopt, 0}, err, errlen);
    else if (c == '?') return unknown_option(a, err, errlen);
    else if (c == ':') return fail(err, errlen, "option %s needs a value", a);
    else {
      c -= OPT_FLAG;
      const flag_info *f = &flags[c];
      o->given |= 1ull << c;
      if (!(cmd->flags & f->group))
        return fail(err, errlen, "option --%s does not apply to 'fatune %s' (see fatune help%s%s)",
                    f->name, cmd->name ? cmd->name : "(main job)", cmd->name ? " " : "",
                    cmd->name ? cmd->name : "");
      char flag[32];
      snprintf(flag, sizeof flag, "--%s", f->name);
      if (apply(o, flag, f->takes_value ? optarg : NULL, err, errlen) != 0) return -1;
    }
  }
  if (o->help) {
    if (o->cmd != CMD_HELP) o->help_cmd = cmd->name;   /* the main job's is fatune's */
    o->cmd = CMD_HELP;
    return 0;
  }
  if (o->cmd == CMD_VERSION) return 0;
  /* getopt_long moved the words after the options; the command is one. */
  for (int i = optind, first = optind, seen = 0; i < argc; i++) {
    if (word && argv[i] == word && !seen++) continue;
    if (positional(o, argv, first, i, err, errlen) != 0) return -1;
  }
  return check_command(o, err, errlen);
}

/* ---- Help ---- */

/* --axis's values, from the space, after its help. */
static void print_axes(FILE *f) {
  gen_axis_name names[MAX_AXES];
  const char *axes[MAX_AXES];
  char err[512], list[512];
  const int count = explore_axes(names, axes, err, sizeof err);
  if (count < 0) {
    fprintf(f, "\n%23s(the axes are unknown: %s)", "", err);
    return;
  }
  axis_list(axes, count, list, sizeof list);
  /* Wrapped at 79 columns, under the help's indent. */
  fputc(':', f);
  int col = 79;
  for (const char *w = strtok(list, " "); w; w = strtok(NULL, " ")) {
    const int len = (int)strlen(w);
    if (col + 1 + len > 79) col = fprintf(f, "\n%23s%s", "", w) - 1;
    else col += fprintf(f, " %s", w);
  }
}

static void print_flags(FILE *f, int groups) {
  for (size_t i = 0; i < NFLAGS; i++) {
    if (!(flags[i].group & groups)) continue;
    char left[40];
    const char *open = flags[i].takes_value == 2 ? "[" : flags[i].meta ? " " : "";
    snprintf(left, sizeof left, "--%s%s%s%s", flags[i].name, open,
             flags[i].meta ? flags[i].meta : "", open[0] == '[' ? "]" : "");
    fprintf(f, "  %-20s ", left);
    for (const char *h = flags[i].help; *h; h++) {
      fputc(*h, f);
      if (*h == '\n') fprintf(f, "%23s", "");
    }
    if (flags[i].group == F_AXIS && !strcmp(flags[i].name, "axis")) print_axes(f);
    fputc('\n', f);
  }
}

static void print_synopsis(FILE *f, const cmd_info *c, const char *lead) {
  fprintf(f, "%s fatune %s%s%s\n", lead, c->name ? c->name : "",
          c->name && c->synopsis[0] ? " " : "", c->synopsis);
}

void cli_help(FILE *f, const char *name) {
  const cmd_info *c = name ? find_command(name) : NULL;
  if (c) {
    print_synopsis(f, c, "usage:");
    fprintf(f, "\n%s\n", c->summary);
    if (c->flags) {
      fputs("\noptions:\n", f);
      print_flags(f, c->flags);
    }
    fprintf(f, "  %-20s %s\n", "--help", "this help");
    fprintf(f, "\nexample:\n  %s\n", c->example);
    return;
  }
  fputs("fatune: an autotuning FlashAttention kernel generator\n\n", f);
  for (size_t i = 0; i < NCOMMANDS; i++) print_synopsis(f, &commands[i], i ? "      " : "usage:");
  fputs("\ncommands:\n", f);
  for (size_t i = 0; i < NCOMMANDS; i++)
    fprintf(f, "  %-10s %s\n", commands[i].name ? commands[i].name : "(none)", commands[i].brief);
  fputs("\noptions (each command takes those its help lists; before or after it;\n"
        "--flag VALUE or --flag=VALUE):\n", f);
  print_flags(f, ~0);
  fprintf(f, "  %-20s %s\n  %-20s %s\n", "--help", "this help; fatune help COMMAND, or "
          "fatune COMMAND --help, for a command's", "--version", "fatune's version");
  fputs("\nexample:\n  fatune --dim 64 --seq 4096\n", f);
}

int cli_colour(int fd) {
  const char *no = getenv("NO_COLOR"), *term = getenv("TERM");
  return isatty(fd) && !(no && no[0]) && !(term && !strcmp(term, "dumb"));
}
