"""A hand-vectorised attention kernel for a search step's single query, tried inside the compiled
greedy search (docs/speed.md, "The gap in one process, and attention by hand").

Inductor writes a step's attention (one query a row, heads of 32, a window of cached keys) as
fused loops that reduce each score over the head's 32 values on its own; in a profile of the
compiled greedy search (`perf`) they took ~10% of the samples. The kernel below (C++, AVX2 and
FMA: all three CPUs of this project have them) scores eight keys at a time with one horizontal
reduction, and is registered as an operator (`TORCH_LIBRARY`) so that the compiled graph's C++
wrapper calls it through PyTorch's dispatcher, no Python. It is built here with
`torch.utils.cpp_extension.load_inline` (a minute, once: PyTorch's extensions cache).

Printed: microseconds a call at a step's shapes against the compiled attention of the model
(`attention_with_weights`, as Inductor compiles it alone) and eager PyTorch; then whole greedy
searches of the trained model's test2016 sentences in batches of 64, one thread, with the
kernel and without taking turns in one process (both compiled first), and whether their tokens
are the same.

    python benchmarks/attention_kernel.py --model runs/m30k-en-de
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from pathlib import Path

from decode_engine import _batches
from decode_speed import SHARED
from engines_in_turn import _ours
from linear_products import microseconds

SOURCE = r'''
#include <torch/library.h>
#include <ATen/ATen.h>
#include <immintrin.h>
#include <cmath>
#include <vector>
#include <ATen/cpu/vec/vec.h>
// one query a row, head size 32, AVX2: scores 8 keys at a time with one horizontal reduction
static inline __m256 hsum8(__m256 a0, __m256 a1, __m256 a2, __m256 a3, __m256 a4, __m256 a5,
                           __m256 a6, __m256 a7) {
  __m256 t0 = _mm256_hadd_ps(a0, a1), t1 = _mm256_hadd_ps(a2, a3);
  __m256 t2 = _mm256_hadd_ps(a4, a5), t3 = _mm256_hadd_ps(a6, a7);
  t0 = _mm256_hadd_ps(t0, t1); t1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(t0, t1, 0x20), _mm256_permute2f128_ps(t0, t1, 0x31));
}
at::Tensor decode_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask) {
  TORCH_CHECK(q.size(3) == 32 && q.stride(3) == 1 && k.stride(3) == 1 && v.stride(3) == 1);
  const int64_t B = q.size(0), H = q.size(1), W = k.size(2);
  auto out = at::empty({B, H, 1, 32}, q.options());
  auto m = mask.expand({B, H, 1, W});
  const float* qp = q.data_ptr<float>(); const float* kp = k.data_ptr<float>();
  const float* vp = v.data_ptr<float>(); const bool* mp = m.data_ptr<bool>();
  float* op = out.data_ptr<float>();
  const auto qs = q.strides(); const auto ks = k.strides(); const auto vs = v.strides();
  const auto ms = m.strides();
  const float scale = 1.0f / std::sqrt(32.0f);
  const int64_t Wp = (W + 7) / 8 * 8;
  std::vector<float> s(Wp);
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  for (int64_t b = 0; b < B; ++b) for (int64_t h = 0; h < H; ++h) {
    const float* qq = qp + b * qs[0] + h * qs[1];
    const float* kk = kp + b * ks[0] + h * ks[1];
    const float* vv = vp + b * vs[0] + h * vs[1];
    const bool* mm = mp + b * ms[0] + h * ms[1];
    const int64_t k2 = ks[2], v2 = vs[2], m3 = ms[3];
    const __m256 q0 = _mm256_mul_ps(_mm256_loadu_ps(qq), _mm256_set1_ps(scale));
    const __m256 q1 = _mm256_mul_ps(_mm256_loadu_ps(qq + 8), _mm256_set1_ps(scale));
    const __m256 q2 = _mm256_mul_ps(_mm256_loadu_ps(qq + 16), _mm256_set1_ps(scale));
    const __m256 q3 = _mm256_mul_ps(_mm256_loadu_ps(qq + 24), _mm256_set1_ps(scale));
    __m256 mx = ninf;
    for (int64_t j0 = 0; j0 < Wp; j0 += 8) {
      __m256 a[8];
      for (int i = 0; i < 8; ++i) {
        const int64_t j = j0 + i < W ? j0 + i : W - 1;
        const float* kj = kk + j * k2;
        __m256 acc = _mm256_mul_ps(q0, _mm256_loadu_ps(kj));
        acc = _mm256_fmadd_ps(q1, _mm256_loadu_ps(kj + 8), acc);
        acc = _mm256_fmadd_ps(q2, _mm256_loadu_ps(kj + 16), acc);
        a[i] = _mm256_fmadd_ps(q3, _mm256_loadu_ps(kj + 24), acc);
      }
      __m256 sc = hsum8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
      alignas(32) float keep[8];
      for (int i = 0; i < 8; ++i) keep[i] = (j0 + i < W && mm[(j0 + i) * m3]) ? 1.f : 0.f;
      const __m256 kept = _mm256_cmp_ps(_mm256_load_ps(keep), _mm256_setzero_ps(), _CMP_NEQ_OQ);
      sc = _mm256_blendv_ps(ninf, sc, kept);
      _mm256_storeu_ps(s.data() + j0, sc);
      mx = _mm256_max_ps(mx, sc);
    }
    float m = at::vec::Vectorized<float>(mx).reduce_max();
    float* oo = op + (b * H + h) * 32;
    if (m == -INFINITY) { for (int d = 0; d < 32; ++d) oo[d] = 0.f; continue; }
    __m256 sum = _mm256_setzero_ps();
    const at::vec::Vectorized<float> mv(m);
    for (int64_t j0 = 0; j0 < Wp; j0 += 8) {
      auto e = (at::vec::Vectorized<float>::loadu(s.data() + j0) - mv).exp_u20();
      e.store(s.data() + j0);
      sum = _mm256_add_ps(sum, e);
    }
    const float inv = 1.f / at::vec::Vectorized<float>(sum).reduce_add();
    __m256 o0 = _mm256_setzero_ps(), o1 = o0, o2 = o0, o3 = o0;
    for (int64_t j = 0; j < W; ++j) {
      const __m256 w = _mm256_set1_ps(s[j]);
      const float* vj = vv + j * v2;
      o0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj), o0);
      o1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 8), o1);
      o2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 16), o2);
      o3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(vj + 24), o3);
    }
    const __m256 iv = _mm256_set1_ps(inv);
    _mm256_storeu_ps(oo, _mm256_mul_ps(o0, iv));
    _mm256_storeu_ps(oo + 8, _mm256_mul_ps(o1, iv));
    _mm256_storeu_ps(oo + 16, _mm256_mul_ps(o2, iv));
    _mm256_storeu_ps(oo + 24, _mm256_mul_ps(o3, iv));
  }
  return out;
}
TORCH_LIBRARY(bench_attention, m) {
  m.def("decode_attention(Tensor q, Tensor k, Tensor v, Tensor mask) -> Tensor");
}
TORCH_LIBRARY_IMPL(bench_attention, CPU, m) { m.impl("decode_attention", &decode_attention); }
'''


def build() -> None:
    """Build (or load from PyTorch's extensions cache) and register the kernel as
    `torch.ops.bench_attention.decode_attention(q, k, v, mask)`."""
    import torch
    from torch.utils.cpp_extension import load_inline

    load_inline("bench_attention", cpp_sources=SOURCE, is_python_module=False,
                extra_cflags=["-O3", "-mavx2", "-mfma", "-DCPU_CAPABILITY_AVX2",
                              "-DCPU_CAPABILITY=AVX2"])
    torch.library.register_fake("bench_attention::decode_attention")(
        lambda q, k, v, mask: q.new_empty(q.shape))


def kernels_alone() -> None:
    """The kernel against Inductor's and eager attention at a step's shapes: 64 rows, 4 heads
    of 32; self-attention over a window of a static buffer, cross-attention over a source."""
    import torch

    from transduce.model.attention import attention_with_weights

    def reference(q, k, v, mask):
        return attention_with_weights(q, k, v, mask)[0]

    inductor = torch.compile(reference, dynamic=True, options={"cpp_wrapper": True})
    print("| attention | window | this kernel us | Inductor's us | eager us | largest difference |")
    print("|---|---|---|---|---|---|")
    for window, kind in ((16, "self"), (32, "self"), (64, "self"), (20, "cross")):
        q = torch.randn(64, 4, 1, 32)
        if kind == "self":  # a window of buffers one position longer, its last positions masked
            k, v = (torch.randn(64, 4, window + 1, 32)[:, :, :window] for _ in range(2))
            mask = (torch.arange(window) <= window - 5)[None]
        else:  # every third source shorter
            k, v = torch.randn(64, 4, window, 32), torch.randn(64, 4, window, 32)
            mask = torch.ones(64, 1, 1, window, dtype=torch.bool)
            mask[::3, ..., 15:] = False
        ours = torch.ops.bench_attention.decode_attention(q, k, v, mask)
        difference = (ours - reference(q, k, v, mask)).abs().max().item()
        args = (q, k, v, mask)
        times = [microseconds(functools.partial(f, *args), 300) for f in (
            torch.ops.bench_attention.decode_attention, inductor, reference)]
        print(f"| {kind} | {window} | {times[0]:.0f} | {times[1]:.0f} | {times[2]:.0f} | "
              f"{difference:.1e} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="runs/m30k-en-de", help="trained run directory")
    parser.add_argument("--src", default=str(SHARED / "multi30k" / "test_2016_flickr.en"))
    parser.add_argument("--rounds", type=int, default=8)
    args = parser.parse_args()

    from transduce import runtime
    runtime.tune()
    import torch

    import transduce.model.attention as attention_module
    from transduce.decoding.config import DecodeConfig
    from transduce.decoding.graphed import compile_for
    from transduce.decoding.translator import Translator

    torch.set_num_threads(1)
    build()
    kernels_alone()
    model_attention = attention_module.attention
    by_hand = {"on": False}  # read by the traced code: a graph for each value

    def attention(q, k, v, mask=None, *, causal=False, dropout=0.0):
        if (by_hand["on"] and q.shape[2] == 1 and q.shape[3] == 32 and mask is not None
                and q.dtype == torch.float32 and not dropout):
            return torch.ops.bench_attention.decode_attention(q, k, v, mask)
        return model_attention(q, k, v, mask, causal=causal, dropout=dropout)

    attention_module.attention = attention
    translator = Translator.load(args.model, device="cpu", compile=False)
    config = translator.model.config
    lines = Path(args.src).read_text(encoding="utf-8").splitlines()
    sources = [translator.tokenizers.src.encode(line) + [config.eos_id] for line in lines]
    batches = list(_batches(sources, 64))
    compiled = compile_for(translator.model, torch.device("cpu"))
    decode = DecodeConfig(beam_size=1, max_len_a=0, max_len_b=64, min_len=1)
    outputs, seconds = {}, {False: [], True: []}
    for on in (False, True):  # each compiles its graphs in its first pass
        by_hand["on"] = on
        outputs[on] = _ours(compiled, decode, sources, batches)
    for _ in range(args.rounds):
        for on in (False, True):
            by_hand["on"] = on
            start = time.perf_counter()
            _ours(compiled, decode, sources, batches)
            seconds[on].append(time.perf_counter() - start)
    ratios = [a / b for a, b in zip(seconds[False], seconds[True], strict=True)]
    print(f"\nwhole greedy searches, {len(sources)} sentences: Inductor's attention "
          f"{statistics.median(seconds[False]):.3f} s a pass, this kernel's "
          f"{statistics.median(seconds[True]):.3f} s (medians of {args.rounds}); speed with "
          f"the kernel, each round: {', '.join(f'{r:.2f}' for r in ratios)}, median "
          f"{statistics.median(ratios):.2f}x; the same tokens: "
          f"{sum(a == b for a, b in zip(outputs[False], outputs[True], strict=True))} of "
          f"{len(sources)}")


if __name__ == "__main__":
    main()
