// Fused ON-LSTM layer for the CPU: a whole sequence (one layer, one direction) per call, with a
// backward pass written by hand.  Built on first use by onlstm/nn/cpp_kernel.py.
//
// Data layout is PyTorch's packed layout: the N = sum_t bs_t rows of step t lie at
// [off_t, off_t + bs_t), bs_t non-increasing (a padded (T, B) batch is the case bs_t = B).
// Pre-activation columns (G = 2n + 4D): [l_i (n) | l_f (n) | o (D) | c^ (D) | i (D) | f (D)].
// Saved activations use the same columns: [p_i | p_f | sigm(o) | tanh(c^) | sigm(i) | sigm(f)],
// where p_* are the softmax outputs of the master-gate logits.
//
// Matrix products: four backends (oneDNN's matmul, oneDNN's linear on packed weights, the kernel's own AVX2
// step products and weight gradient beside that linear, ATen's GEMM, i.e. MKL in PyTorch's standard build), the one in use chosen
// by timing them (cpp_kernel.py); see "Matrix products" below for why several and how oneDNN's per-shape
// caches are kept bounded.
#include <atomic>
// ATen's tensor and the few operators called here (not <ATen/ATen.h>, which declares every operator), and torch's
// operator registration, not <torch/extension.h> (torch's whole C++ API: nn, optim, data, jit) nor pybind11: each
// parsed longer than this file's own code (docs/results/layer.md, "Compiling the C++ kernel")
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/allclose.h>
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/zeros.h>
#include <torch/library.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <dlfcn.h>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

// NaN and Inf must propagate as in the reference path, so the kernel is built without -ffast-math
// (its -ffinite-math-only lets the compiler assume there are none: a NaN input came out finite).
// glibc declares its vectorised exp (libmvec) only under -ffast-math; declaring it here keeps the
// element-wise loops vectorised without that assumption. libmvec's exp returns NaN for NaN and
// handles +-Inf like the scalar exp.
#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP)
extern "C" {
#pragma omp declare simd notinbranch
double exp(double) noexcept;
#pragma omp declare simd notinbranch
float expf(float) noexcept;
}
#endif

using at::Tensor;

namespace {

// ---------------------------------------------------------------------------------------------
// Matrix products
// ---------------------------------------------------------------------------------------------
//
// Three backends, one in use per process (set_gemm_backend; cpp_kernel.py times the available ones at
// first use and keeps the fastest, since which one wins depends on the CPU, not on its name):
// * oneDNN's matmul, through the function ATen's own oneDNN matmul uses (at::native::mkldnn_matmul,
//   exported by libtorch_cpu but not in its installed headers: looked up by name, so that a torch
//   without it falls back to MKL instead of failing to load). On an AMD EPYC it ran these products
//   at 100-230 GFLOP/s where MKL ran them at 45-105 (issue #34). It builds and caches a primitive
//   (~0.6 MiB) for every new product shape, and packed batches bring new shapes all the time: the
//   memory grew by gigabytes when every shape was asked for (issue #25). So this kernel asks oneDNN
//   for a bounded set of shapes only: a step's row count is padded up to a bucket (at most 4 per
//   doubling, under 1/4 more rows; padded rows are computed and thrown away), and products over all
//   rows of a sequence run in blocks of kBlockRows rows, the tail in blocks of powers of two (under
//   kTailRows rows padded): 7 shapes per product. Fewer buckets would pad more rows; more would keep
//   more primitives (the logic classifier's training meets about 75 in its first 100 steps).
// * "linear": oneDNN's inner product on weights packed once per layer call (the ops behind
//   torch.compile's CPU linear, see pack_weight) for the products that read a weight (the per-step
//   products, the input projection, d_x), ATen's GEMM for the weight gradients. It needs no matmul:
//   on an AVX2-only CPU, where oneDNN's matmul refuses float32 (it needs AVX-512 or AVX-NE-CONVERT),
//   its blocked weights ran the step products 1.2-1.3x faster than MKL (issue #46).
// * "avx2": the linear route, but the per-step products and the weight gradient by this file's own AVX2 code
//   ("Own products" below), where the build has AVX2 and FMA.
// * ATen's GEMM (MKL), which keeps nothing per shape: float64 always, and the fallback.

constexpr int64_t kBlockRows = 1024;  // a power of two, so a tail splits into the shapes below it
constexpr int64_t kTailRows = 16;     // the smallest tail block: smaller ones would add shapes to save < 16 rows
// Whether this build has the own AVX2 step products (the "avx2" backend): the kernel is built for the CPU it
// runs on (-march=native), so this says whether that CPU has AVX2 and FMA.
#if defined(__AVX2__) && defined(__FMA__)
constexpr bool kOwnSteps = true;
#else
constexpr bool kOwnSteps = false;
#endif

// The padded row count: m itself up to 4, then rounded up to 4 steps per doubling.
int64_t bucket_rows(int64_t m) {
  if (m <= 4) return m;
  const int64_t log2 = 63 - __builtin_clzll(static_cast<unsigned long long>(m - 1));
  const int64_t step = int64_t(1) << (log2 - 2);
  return (m + step - 1) / step * step;
}

// (first row, padded rows) of the blocks over N rows; the last block's padded rows may pass N. With oneDNN:
// blocks of kBlockRows, then the rest padded to a multiple of kTailRows and split into powers of two.
std::vector<std::pair<int64_t, int64_t>> row_blocks(int64_t N, bool dnnl) {
  std::vector<std::pair<int64_t, int64_t>> blocks;
  if (!dnnl) {
    if (N > 0) blocks.emplace_back(0, N);
    return blocks;
  }
  int64_t s = 0;
  for (; s + kBlockRows <= N; s += kBlockRows) blocks.emplace_back(s, kBlockRows);
  int64_t rest = (N - s + kTailRows - 1) / kTailRows * kTailRows;  // at most kBlockRows
  for (int64_t p = kBlockRows; rest > 0; p /= 2) {
    if (rest < p) continue;
    blocks.emplace_back(s, p);
    s += p;
    rest -= p;
  }
  return blocks;
}

int64_t padded_rows(const std::vector<std::pair<int64_t, int64_t>>& blocks) {
  return blocks.empty() ? 0 : blocks.back().first + blocks.back().second;
}

using DnnlMatmul = void (*)(const Tensor&, const Tensor&, const Tensor&, float, float);

// bfloat16 products (a float32 call under torch.autocast(cpu, bfloat16), where cpp_kernel.py found them faster
// than float32 here): every product reads its operands rounded to bfloat16 and accumulates in float32 (oneDNN's
// bfloat16 routes: AMX or AVX-512 BF16), its result comes back as float32, and everything else (the gates, the
// cumax, the cell state, the saved activations) stays float32, as under the Triton kernel's autocast. Set for the
// duration of one forward or backward call on the calling thread (Bf16Scope).
thread_local bool t_bf16 = false;

struct Bf16Scope {
  bool old;
  explicit Bf16Scope(bool on) : old(t_bf16) { t_bf16 = on; }
  ~Bf16Scope() { t_bf16 = old; }
};

// a as the products read it: bfloat16 under t_bf16 (a copy, unless it is already), else itself
Tensor mm_operand(const Tensor& a) { return t_bf16 && a.scalar_type() != at::kBFloat16 ? a.to(at::kBFloat16) : a; }

enum class Backend { kMkl, kOnednn, kLinear, kAvx2 };

struct GemmState {
  DnnlMatmul dnnl = nullptr;  // null: oneDNN's matmul is not usable here (why_not says why)
  std::string why_not;
  Backend backend = Backend::kMkl;
};

// Find oneDNN's matmul and check it once on a small product against ATen's GEMM.
GemmState probe_gemm() {
  GemmState st;
  void* lib = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  void* sym = lib ? dlsym(lib, "_ZN2at6native13mkldnn_matmulERKNS_6TensorES3_S3_ff") : nullptr;
  if (sym == nullptr) {
    st.why_not = "this torch exports no at::native::mkldnn_matmul";
    return st;
  }
  auto fn = reinterpret_cast<DnnlMatmul>(sym);
  try {
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    // fixed values, not at::randn: the probe runs at a kernel's first use, and drawing from torch's
    // generator there would shift every later random number (a resumed run would differ from an
    // uninterrupted one)
    Tensor a = at::arange(19 * 37, at::kFloat).mul_(0.37).sin_().reshape({19, 37});
    Tensor b = at::arange(37 * 23, at::kFloat).mul_(0.91).cos_().reshape({37, 23});
    Tensor c = at::empty({19, 23});
    fn(a, b, c, 0.0f, 1.0f);
    if (!at::allclose(c, at::mm(a, b), 1e-4, 1e-4)) {
      st.why_not = "oneDNN's matmul disagreed with ATen's GEMM on a test product";
      return st;
    }
  } catch (const std::exception& e) {
    std::string msg = e.what();
    st.why_not = "oneDNN's matmul refused float32: " + msg.substr(0, msg.find('\n'));
    return st;
  }
  st.dnnl = fn;
  st.backend = Backend::kOnednn;
  return st;
}

GemmState& gemm_state() {
  static GemmState st = probe_gemm();
  return st;
}

// Whether a float32 call takes a oneDNN route (matmul or linear): rows bucketed, weights packed.
bool use_dnnl(const Tensor& x) { return x.scalar_type() == at::kFloat && gemm_state().backend != Backend::kMkl; }

// c = a @ b, or c += a @ b; c is a contiguous block of rows. `dnnl`: the call's oneDNN route, whose
// plain products are the matmul's (the linear route leaves them to ATen's GEMM).
void gemm(const Tensor& a, const Tensor& b, Tensor c, bool accumulate, bool dnnl) {
  if (t_bf16) {  // ATen's bfloat16 product (oneDNN's), float32 accumulation, its bfloat16 result widened
    Tensor p = at::mm(mm_operand(a), mm_operand(b));
    accumulate ? c.add_(p) : c.copy_(p);
  } else if (dnnl && gemm_state().backend == Backend::kOnednn) {
    gemm_state().dnnl(a, b, c, accumulate ? 1.0f : 0.0f, 1.0f);
  } else if (accumulate) {
    c.addmm_(a, b);
  } else {
    at::mm_out(c, a, b);
  }
}

// ---------------------------------------------------------------------------------------------
// Buffers kept from call to call
// ---------------------------------------------------------------------------------------------
//
// A layer call needs buffers of tens of MiB (the activations, the gate gradients: N x G values).
// glibc serves blocks over 32 MiB (and smaller ones, depending on history) with fresh pages from the
// kernel and returns them on free, so every call paid a page fault per 4 KiB written: 10% of a
// T=70 B=80 H=1150 forward+backward on one thread went to the kernel (perf). The pool keeps the large
// buffers by role (activations, cells, gate gradients, ...): a request takes a free buffer of its role
// (one no returned tensor views any more) that is large enough, else replaces a free one that is too
// small by one of the new size plus 1/8. So each role's buffers grow to the largest call seen and stay
// there: what the pool holds is the largest call's working set, which the process needed at its peak
// anyway, not one buffer per row count (packed batches bring a new row count every step). At most
// kPerRole buffers of a role (layers whose saved activations are alive at once) are kept.
enum Role { kAct, kOut, kCells, kPadX, kGates, kHx, kDw, kDx, kRoles };
constexpr size_t kPerRole = 4;
constexpr int64_t kPoolMinBytes = int64_t(1) << 20;  // smaller blocks: the allocator reuses them

class BufferPool {
 public:
  // An uninitialised contiguous tensor of `shape`.
  Tensor take(Role role, at::IntArrayRef shape, const at::TensorOptions& opts) {
    const int64_t numel = c10::multiply_integers(shape);
    if (numel * int64_t(opts.dtype().itemsize()) < kPoolMinBytes || !enabled_) return at::empty(shape, opts);
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<Tensor>& bufs = bufs_[role];
    Tensor* best = nullptr;
    Tensor* small = nullptr;  // a free buffer too small for this request
    for (Tensor& b : bufs) {
      if (!is_free(b) || b.dtype() != opts.dtype()) continue;
      if (b.numel() < numel) {
        small = &b;
      } else if (best == nullptr || b.numel() < best->numel()) {
        best = &b;
      }
    }
    if (best != nullptr) return best->narrow(0, 0, numel).view(shape);
    Tensor fresh = at::empty({numel + numel / 8}, opts);  // room for a slightly larger next call
    if (small != nullptr) {
      *small = fresh;
    } else if (bufs.size() < kPerRole) {
      bufs.push_back(fresh);
    }
    return fresh.narrow(0, 0, numel).view(shape);
  }

  void set_enabled(bool on) {
    std::lock_guard<std::mutex> lock(mu_);
    enabled_ = on;  // off: requests bypass the pool, which keeps what it holds (for A/B timings)
  }

  // (buffers held, of which free, bytes held)
  std::vector<int64_t> stats() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t held = 0, free = 0, bytes = 0;
    for (const auto& bufs : bufs_) {
      for (const Tensor& b : bufs) {
        held += 1;
        free += is_free(b);
        bytes += b.nbytes();
      }
    }
    return {held, free, bytes};
  }

 private:
  static bool is_free(const Tensor& b) { return b.storage().use_count() == 1; }
  std::mutex mu_;
  std::vector<Tensor> bufs_[kRoles];
  bool enabled_ = true;
};

BufferPool& pool() {
  static BufferPool* p = new BufferPool();  // never destroyed: tensors may outlive static destruction
  return *p;
}

Tensor pooled(Role role, at::IntArrayRef shape, const at::TensorOptions& opts) {
  return pool().take(role, shape, opts);
}

void set_buffer_pool(bool on) { pool().set_enabled(on); }

std::vector<int64_t> buffer_pool_stats() { return pool().stats(); }

// x with zero rows appended up to `rows` (x itself when it has them).
Tensor pad_rows(const Tensor& x, int64_t rows) {
  if (x.size(0) >= rows) return x.contiguous();
  Tensor p = pooled(kPadX, {rows, x.size(1)}, x.options());
  p.narrow(0, 0, x.size(0)).copy_(x);
  p.narrow(0, x.size(0), rows - x.size(0)).zero_();
  return p;
}

// For the backend timing and the benchmarks' roofline: one product through the named library, no padding,
// whatever backend the layers are set to (not through gemm(), which takes the set backend's route: the timing
// of a second layer size runs with the first size's choice set). `accumulate`: c += a @ b, as the kernel's
// weight gradient adds its row blocks.
void matmul(const Tensor& a, const Tensor& b, Tensor c, const std::string& backend, bool accumulate) {
  TORCH_CHECK(backend == "mkl" || backend == "onednn", "backend must be mkl or onednn, got ", backend);
  if (backend == "mkl") {
    accumulate ? c.addmm_(a, b) : at::mm_out(c, a, b);
    return;
  }
  TORCH_CHECK(gemm_state().dnnl != nullptr, gemm_state().why_not);
  gemm_state().dnnl(a, b, c, accumulate ? 1.0f : 0.0f, 1.0f);
}

// The per-step products (h @ w_hh^T forward, dG @ w_hh backward) read the same weight T times. oneDNN's
// matmul on a plain weight converts it to its blocked layout on every call; the ops behind
// torch.compile's CPU linear take a weight converted once ("packed"): the weight is packed once per layer
// call (twice: forward and backward need it transposed differently) and every step reads the packed copy.
// They are dispatcher ops (mkldnn::_reorder_linear_weight, mkldnn::_linear_pointwise), looked up by
// name: a torch without them keeps the plain matmul. Their primitives are cached per shape like the
// matmul's, so the step products keep the bucketed row counts.
using ReorderFn = Tensor(const Tensor&, std::optional<int64_t>);
using LinearFn = Tensor(const Tensor&, const Tensor&, const std::optional<Tensor>&, c10::string_view,
                        c10::List<std::optional<c10::Scalar>>, std::optional<c10::string_view>);

struct PackedState {
  std::optional<c10::TypedOperatorHandle<ReorderFn>> reorder;
  std::optional<c10::TypedOperatorHandle<LinearFn>> linear;
  bool ok = false;  // found, and agreed with ATen's GEMM on a test product
  bool use = false;
};

PackedState probe_packed() {
  PackedState st;
  try {
    auto& d = c10::Dispatcher::singleton();
    auto r = d.findSchema({"mkldnn::_reorder_linear_weight", ""});
    auto l = d.findSchema({"mkldnn::_linear_pointwise", ""});
    if (!r.has_value() || !l.has_value()) return st;
    st.reorder = r->typed<ReorderFn>();
    st.linear = l->typed<LinearFn>();
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    at::NoGradGuard no_grad;
    // fixed values: drawing from torch's generator here would shift every later random number (see above)
    Tensor a = at::arange(19 * 37, at::kFloat).mul_(0.37).sin_().reshape({19, 37});
    Tensor w = at::arange(23 * 37, at::kFloat).mul_(0.53).cos_().reshape({23, 37});
    Tensor y = st.linear->call(a, st.reorder->call(w, std::nullopt), std::nullopt, "none", c10::List<std::optional<c10::Scalar>>(), std::nullopt);
    st.ok = st.use = at::allclose(y, at::mm(a, w.t()), 1e-4, 1e-4);
  } catch (const std::exception&) {
    st.use = false;
  }
  return st;
}

PackedState& packed_state() {
  static PackedState st = probe_packed();
  return st;
}

// Whether the bfloat16 products run here: ATen's bfloat16 product, and the packed one (the linear ops above on a
// bfloat16 weight), each checked once on a small product against float32 (bfloat16 keeps 8 bits: 3e-2).
struct Bf16State {
  bool plain = false, packed_ok = false, packed = false;  // packed: in use (set_bf16_packed turns it off)
  std::string why_not;  // empty: the plain product runs
};

Bf16State probe_bf16() {
  Bf16State st;
  c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
  at::NoGradGuard no_grad;
  Tensor a = at::arange(19 * 37, at::kFloat).mul_(0.37).sin_().reshape({19, 37});
  Tensor w = at::arange(23 * 37, at::kFloat).mul_(0.53).cos_().reshape({23, 37});
  Tensor want = at::mm(a, w.t()), a16 = a.to(at::kBFloat16), w16 = w.to(at::kBFloat16);
  try {
    st.plain = at::allclose(at::mm(a16, w16.t()).to(at::kFloat), want, 3e-2, 3e-2);
    if (!st.plain) st.why_not = "ATen's bfloat16 product disagreed with float32 on a test product";
  } catch (const std::exception& e) {
    std::string msg = e.what();
    st.why_not = "ATen refused a bfloat16 product: " + msg.substr(0, msg.find('\n'));
  }
  PackedState& pk = packed_state();
  if (!st.plain || !pk.ok) return st;
  try {
    Tensor y = pk.linear->call(a16, pk.reorder->call(w16, std::nullopt), std::nullopt, "none",
                               c10::List<std::optional<c10::Scalar>>(), std::nullopt);
    st.packed = st.packed_ok = at::allclose(y.to(at::kFloat), want, 3e-2, 3e-2);
  } catch (const std::exception&) {
    st.packed = false;  // the plain bfloat16 product serves
  }
  return st;
}

Bf16State& bf16_state() {
  static Bf16State st = probe_bf16();
  return st;
}

std::string bf16_why_not() { return bf16_state().why_not; }
bool bf16_packed() { return bf16_state().packed; }

// The bfloat16 products on packed weights on or off (tests force the plain route); false if unavailable.
bool set_bf16_packed(bool on) {
  Bf16State& st = bf16_state();
  if (on && !st.packed_ok) return false;
  st.packed = on;
  return true;
}

// w (out, in) packed for y = x @ w^T; undefined where packed products are off (the caller then uses gemm).
Tensor pack_weight(const Tensor& w, bool dnnl, int64_t steps) {
  PackedState& st = packed_state();
  if (!dnnl || !(t_bf16 ? bf16_state().packed : st.use) || steps < 2) return Tensor();
  at::NoGradGuard no_grad;  // the ops have no autograd formula; the kernel's own backward is by hand
  return st.reorder->call(mm_operand(w).contiguous(), std::nullopt);
}

// x @ w^T (+ bias) with w from pack_weight: a new (x.size(0), out) tensor.
Tensor packed_product(const Tensor& x, const Tensor& packed, const std::optional<Tensor>& bias = std::nullopt) {
  at::NoGradGuard no_grad;  // float32 only: the bfloat16 products go through product_bf16
  return packed_state().linear->call(x, packed, bias, "none", c10::List<std::optional<c10::Scalar>>(), std::nullopt);
}

// x @ w^T under t_bf16, left in bfloat16: the per-step products, whose rows the element-wise loops widen
// themselves (a separate conversion pass cost a fifth of a call at B=20 H=650); packed or plain.
Tensor product_bf16(const Tensor& x, const Tensor& packed, const Tensor& w_t) {
  at::NoGradGuard no_grad;
  if (!packed.defined()) return at::mm(x, w_t);
  return packed_state().linear->call(x, packed, std::nullopt, "none", c10::List<std::optional<c10::Scalar>>(),
                                     std::nullopt);
}

// (templates only so that the float64 instantiation of the row loops compiles; bfloat16 runs float32 calls only)
template <typename T>
void widen_row(const at::BFloat16* src, T* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<T>(static_cast<float>(src[i]));
}

template <typename T>
void round_row(const T* src, at::BFloat16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = at::BFloat16(static_cast<float>(src[i]));
}

bool packed_steps() { return packed_state().use; }

// The linear route: the products over all rows that read a weight (input projection, d_x) packed too.
bool linear_route(bool dnnl) {
  const Backend b = gemm_state().backend;
  if (t_bf16) return dnnl && bf16_state().packed;
  return dnnl && (b == Backend::kLinear || b == Backend::kAvx2) && packed_state().use;
}

// rows x @ w^T (+ bias) into out, block by block, w packed once (the linear route).
void packed_blocks(const Tensor& x, const Tensor& w, const std::optional<Tensor>& bias, Tensor out,
                   const std::vector<std::pair<int64_t, int64_t>>& blocks) {
  Tensor w_p = pack_weight(w, true, 2);
  for (const auto& [s, r] : blocks) {
    Tensor o = out.narrow(0, s, r);
    if (!t_bf16) {
      o.copy_(packed_product(x.narrow(0, s, r), w_p, bias));
      continue;
    }
    o.copy_(product_bf16(mm_operand(x.narrow(0, s, r)), w_p, Tensor()));  // widened by the copy itself
    if (bias.has_value()) o.add_(*bias);
  }
}

// Packed step products on or off (for benchmarks and tests); false if they are not available.
bool set_packed_steps(bool on) {
  PackedState& st = packed_state();
  if (on && !st.ok) return false;
  st.use = on;
  return true;
}

std::string gemm_backend() {
  switch (gemm_state().backend) {
    case Backend::kOnednn: return "onednn";
    case Backend::kLinear: return "linear";
    case Backend::kAvx2: return "avx2";
    default: return "mkl";
  }
}

std::string gemm_why_not_onednn() { return gemm_state().why_not; }

// The backends that run here, in the order "onednn", "linear", "avx2", "mkl" (mkl always).
std::vector<std::string> gemm_backends() {
  std::vector<std::string> out;
  if (gemm_state().dnnl != nullptr) out.push_back("onednn");
  if (packed_state().ok) out.push_back("linear");
  if (packed_state().ok && kOwnSteps) out.push_back("avx2");
  out.push_back("mkl");
  return out;
}

// "onednn", "linear", "avx2" or "mkl"; returns false (and changes nothing) when that backend does not run
// here. The linear and avx2 routes need the packed products, so choosing one turns them on.
bool set_gemm_backend(const std::string& backend) {
  TORCH_CHECK(backend == "mkl" || backend == "onednn" || backend == "linear" || backend == "avx2",
              "backend must be mkl, onednn, linear or avx2, got ", backend);
  GemmState& st = gemm_state();
  if (backend == "onednn" && st.dnnl == nullptr) return false;
  if ((backend == "linear" || backend == "avx2") && !packed_state().ok) return false;
  if (backend == "avx2" && !kOwnSteps) return false;
  st.backend = backend == "onednn" ? Backend::kOnednn
               : backend == "linear" ? Backend::kLinear
               : backend == "avx2"   ? Backend::kAvx2
                                     : Backend::kMkl;
  if (backend == "linear" || backend == "avx2") packed_state().use = true;
  return true;
}

// ---------------------------------------------------------------------------------------------
// Own products (the "avx2" backend)
// ---------------------------------------------------------------------------------------------
//
// The per-step products are small in one dimension (the batch: B rows) and read a large weight (G x D) once
// per step. On an AVX2-only AMD EPYC no library route ran them near the machine's rate: 49 GFLOP/s through MKL,
// 59 through oneDNN's linear on a packed weight, where MKL reaches 81 on large square products and oneDNN's
// fused LSTM 68 (benchmarks/gemm_routes.py, issue #46). This code computes out = a @ w^T (or a @ w) with the
// weight packed once per layer call into panels of kMr output columns, k-major, and each step's rows of `a`
// packed into panels of kNr rows, k-major: the 6 x 16 register tile (12 accumulators of 8 floats) then reads
// one weight panel (kMr x K floats, from L1) and streams the row panels (from L2), 12 FMAs per 2 loads and
// 6 broadcasts. Row panels of at most 8 rows (a batch's last rows) take a 12 x 8 tile. Padded values are zeros
// and their results are never written; a NaN or infinity in a real row reaches its outputs as in any GEMM.
constexpr int64_t kMr = 6, kNr = 16;
constexpr int64_t kLanes = kNr;  // the outputs of a weight panel for lanes_tile (the other orientation, below)

// Whether a batch of b rows ends in a row panel of at most 8 rows, packed 8 wide (tile_12x8).
inline bool half_tail(int64_t b) { return b % kNr != 0 && b % kNr <= 8; }

// Where a product's results go: row i, output m at p[i * ldc + m] (or, `by_output`, at p[m * ldc + i]), added
// to what is there when `acc`.
struct TileOut {
  float* p;
  int64_t ldc;
  bool acc;
  bool by_output = false;
};

// The rows operand of a product: b rows, element (i, k) at a[i * rs + k * ks] (a row-major matrix: rs = its
// leading dimension, ks = 1; the transpose of one: rs = 1, ks = its leading dimension).
struct Rows {
  const float* a;
  int64_t b, rs, ks;
};

#if defined(__AVX2__) && defined(__FMA__)
// Element (r, c) of a kMr x kNr tile (output m0 + r of row b0 + c) for r < rows, c < cols into o; by output, a
// row of the tile is a run of the output's row (whole cache lines, where by row each is 6 values of a line).
inline void store_tile(const float (*t)[kNr], const TileOut& o, int64_t m0, int64_t b0, int64_t rows,
                       int64_t cols) {
  const int64_t sr = o.by_output ? o.ldc : 1, sc = o.by_output ? 1 : o.ldc;
  float* base = o.p + (o.by_output ? m0 * o.ldc + b0 : b0 * o.ldc + m0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      float& d = base[r * sr + c * sc];
      d = o.acc ? d + t[r][c] : t[r][c];
    }
  }
}

// The tile of one weight panel `w` (K x kMr) and one row panel `a` (K x kNr): 16 rows.
void tile_6x16(const float* w, const float* a, int64_t K, const TileOut& o, int64_t m0, int64_t b0, int64_t rows,
               int64_t cols) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  // named accumulators, not an array: an array of __m256 was kept in memory by GCC (2.6x slower)
  for (int64_t k = 0; k < K; ++k) {
    const __m256 x0 = _mm256_loadu_ps(a + k * kNr), x1 = _mm256_loadu_ps(a + k * kNr + 8);
    const float* wk = w + k * kMr;
    __m256 v = _mm256_broadcast_ss(wk);
    c00 = _mm256_fmadd_ps(v, x0, c00), c01 = _mm256_fmadd_ps(v, x1, c01);
    v = _mm256_broadcast_ss(wk + 1);
    c10 = _mm256_fmadd_ps(v, x0, c10), c11 = _mm256_fmadd_ps(v, x1, c11);
    v = _mm256_broadcast_ss(wk + 2);
    c20 = _mm256_fmadd_ps(v, x0, c20), c21 = _mm256_fmadd_ps(v, x1, c21);
    v = _mm256_broadcast_ss(wk + 3);
    c30 = _mm256_fmadd_ps(v, x0, c30), c31 = _mm256_fmadd_ps(v, x1, c31);
    v = _mm256_broadcast_ss(wk + 4);
    c40 = _mm256_fmadd_ps(v, x0, c40), c41 = _mm256_fmadd_ps(v, x1, c41);
    v = _mm256_broadcast_ss(wk + 5);
    c50 = _mm256_fmadd_ps(v, x0, c50), c51 = _mm256_fmadd_ps(v, x1, c51);
  }
  alignas(32) float t[kMr][kNr];
  const __m256 lo[kMr] = {c00, c10, c20, c30, c40, c50}, hi[kMr] = {c01, c11, c21, c31, c41, c51};
  for (int64_t r = 0; r < kMr; ++r) _mm256_store_ps(t[r], lo[r]), _mm256_store_ps(t[r] + 8, hi[r]);
  store_tile(t, o, m0, b0, rows, cols);
}

// Two weight panels (w and w2, 12 outputs) against a row panel of at most 8 rows, packed 8 wide: a batch's last
// rows. 12 accumulators keep both FMA pipes busy, where one panel's 6 would wait on the FMAs' latency. A last
// weight panel without a partner is given as both (rows <= kMr: the second half is computed, not stored).
void tile_12x8(const float* w, const float* w2, const float* a, int64_t K, const TileOut& o, int64_t m0, int64_t b0,
               int64_t rows, int64_t cols) {
  __m256 c0 = _mm256_setzero_ps(), c1 = c0, c2 = c0, c3 = c0, c4 = c0, c5 = c0;
  __m256 d0 = c0, d1 = c0, d2 = c0, d3 = c0, d4 = c0, d5 = c0;
  for (int64_t k = 0; k < K; ++k) {
    const __m256 x = _mm256_loadu_ps(a + k * 8);
    const float* wk = w + k * kMr;
    const float* vk = w2 + k * kMr;
    c0 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk), x, c0);
    c1 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + 1), x, c1);
    c2 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + 2), x, c2);
    c3 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + 3), x, c3);
    c4 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + 4), x, c4);
    c5 = _mm256_fmadd_ps(_mm256_broadcast_ss(wk + 5), x, c5);
    d0 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk), x, d0);
    d1 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk + 1), x, d1);
    d2 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk + 2), x, d2);
    d3 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk + 3), x, d3);
    d4 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk + 4), x, d4);
    d5 = _mm256_fmadd_ps(_mm256_broadcast_ss(vk + 5), x, d5);
  }
  alignas(32) float t[kMr][kNr];
  const __m256 v[kMr] = {c0, c1, c2, c3, c4, c5}, u[kMr] = {d0, d1, d2, d3, d4, d5};
  for (int64_t r = 0; r < kMr; ++r) _mm256_store_ps(t[r], v[r]);
  store_tile(t, o, m0, b0, std::min(rows, kMr), cols);
  if (rows <= kMr) return;
  for (int64_t r = 0; r < kMr; ++r) _mm256_store_ps(t[r], u[r]);
  store_tile(t, o, m0 + kMr, b0, rows - kMr, cols);
}

// The other orientation, for batches whose rows fill 8-wide vectors badly (20 rows take 24 lanes above): the
// outputs along the vector (a weight panel of kLanes outputs, k-major) and R <= 6 rows of `a` broadcast from their
// own rows, so any batch splits into groups of 5 and 6 rows without a lane to spare. 2R accumulators; R = 5 or 6
// keep both FMA pipes busy (4 rows, 8 accumulators, sit at the FMAs' latency: lanes_groups avoids them).
#define ONLSTM_ROW(i, x, c0, c1)                    \
  if constexpr (R > i) {                           \
    x = _mm256_broadcast_ss(a + i * lda + k);      \
    c0 = _mm256_fmadd_ps(x, w0, c0);               \
    c1 = _mm256_fmadd_ps(x, w1, c1);               \
  }
template <int R>
void lanes_tile(const float* w, const float* a, int64_t lda, int64_t K, const TileOut& o, int64_t m0, int64_t b0,
                int64_t cols) {
  __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
  __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
  for (int64_t k = 0; k < K; ++k) {  // named accumulators (see tile_6x16); the rows past R compile away
    const __m256 w0 = _mm256_loadu_ps(w + k * kLanes), w1 = _mm256_loadu_ps(w + k * kLanes + 8);
    __m256 x;
    ONLSTM_ROW(0, x, c00, c01)
    ONLSTM_ROW(1, x, c10, c11)
    ONLSTM_ROW(2, x, c20, c21)
    ONLSTM_ROW(3, x, c30, c31)
    ONLSTM_ROW(4, x, c40, c41)
    ONLSTM_ROW(5, x, c50, c51)
  }
  const __m256 lo[kMr] = {c00, c10, c20, c30, c40, c50}, hi[kMr] = {c01, c11, c21, c31, c41, c51};
  alignas(32) float t[kMr][kNr];  // row b0 + r, output m0 + c: store_tile's tile with its two roles swapped
  for (int64_t r = 0; r < R; ++r) _mm256_store_ps(t[r], lo[r]), _mm256_store_ps(t[r] + 8, hi[r]);
  store_tile(t, TileOut{o.p, o.ldc, o.acc, !o.by_output}, b0, m0, R, cols);
}
#undef ONLSTM_ROW

void lanes_tile_rows(int64_t R, const float* w, const float* a, int64_t lda, int64_t K, const TileOut& o,
                     int64_t m0, int64_t b0, int64_t cols) {
  switch (R) {
    case 6: return lanes_tile<6>(w, a, lda, K, o, m0, b0, cols);
    case 5: return lanes_tile<5>(w, a, lda, K, o, m0, b0, cols);
    case 4: return lanes_tile<4>(w, a, lda, K, o, m0, b0, cols);
    case 3: return lanes_tile<3>(w, a, lda, K, o, m0, b0, cols);
    case 2: return lanes_tile<2>(w, a, lda, K, o, m0, b0, cols);
    default: return lanes_tile<1>(w, a, lda, K, o, m0, b0, cols);
  }
}

#endif

// f(lo, hi) over 0 .. n - 1: each thread works through its own share (the same one at every step, as with
// at::parallel_for), `chunk` at a time, then takes the chunks another thread has not started. Fixed halves left
// each of two threads waiting ~14 ms of a 230 ms call (B=20 H=650, a shared AVX2 EPYC); chunks handed to any
// free thread lost more than that in some windows (the panels moving between the threads' caches); this took
// 2-3% off a call in every window measured (docs/results/layer.md, "Panels to whichever thread is free").
template <typename F>
void parallel_shares(int64_t n, int64_t chunk, const F& f) {
  const int64_t threads = std::min<int64_t>((n + chunk - 1) / chunk, at::get_num_threads());
  if (threads <= 1 || at::in_parallel_region()) {
    if (n > 0) f(0, n);
    return;
  }
  const int64_t share = (n + threads - 1) / threads;
  std::vector<std::atomic<int64_t>> next(threads);
  for (int64_t t = 0; t < threads; ++t) next[t].store(t * share, std::memory_order_relaxed);
  at::parallel_for(0, threads, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t me = lo; me < hi; ++me) {
      for (int64_t i = 0; i < threads; ++i) {
        const int64_t t = (me + i) % threads, end = std::min(n, (t + 1) * share);
        for (int64_t s = next[t].fetch_add(chunk, std::memory_order_relaxed); s < end;
             s = next[t].fetch_add(chunk, std::memory_order_relaxed)) {
          f(s, std::min(end, s + chunk));
        }
      }
    }
  });
}

// w packed for out = a @ w^T (w: M x K) or, `transposed`, for out = a @ w (w: K x M): (panels, K, width),
// panel p holding outputs p * width ... p * width + width - 1 (zeros past M); width kMr for tile_6x16 and
// tile_12x8, kLanes for lanes_tile.
Tensor own_pack(const Tensor& w, bool transposed, int64_t width = kMr) {
  const Tensor wc = w.contiguous();
  const int64_t M = transposed ? wc.size(1) : wc.size(0), K = transposed ? wc.size(0) : wc.size(1);
  const int64_t P = (M + width - 1) / width;
  Tensor out = at::empty({P, K, width}, wc.options());
  const float* src = wc.data_ptr<float>();
  float* dst = out.data_ptr<float>();
  if (transposed) {  // row k holds every panel's values side by side: read it once, in order, into each panel
    // (panel by panel instead, each panel's slice of every row would cost a cache line or two of a far row:
    // 5-7 ms against about 1 for w_hh at H=650 on the AVX2 EPYC)
    at::parallel_for(0, K, 64, [&](int64_t lo, int64_t hi) {
      for (int64_t k = lo; k < hi; ++k) {
        for (int64_t p = 0; p < P; ++p) {
          const int64_t n = std::min(width, M - p * width);
          const float* s = src + k * M + p * width;
          float* d = dst + (p * K + k) * width;
          for (int64_t r = 0; r < n; ++r) d[r] = s[r];
          for (int64_t r = n; r < width; ++r) d[r] = 0.0f;
        }
      }
    });
    return out;
  }
  at::parallel_for(0, P, 1, [&](int64_t lo, int64_t hi) {  // output m's values are row m: read along it
    for (int64_t p = lo; p < hi; ++p) {
      float* d = dst + p * K * width;
      for (int64_t r = 0; r < width; ++r) {
        const int64_t m = p * width + r;
        if (m < M) {
          for (int64_t k = 0; k < K; ++k) d[k * width + r] = src[m * K + k];
        } else {
          for (int64_t k = 0; k < K; ++k) d[k * width + r] = 0.0f;
        }
      }
    }
  });
  return out;
}

// Row panels q0 .. q1 - 1 of `a` over k0 .. k0 + kl - 1, k-major, into `scratch` (panel q at (q - q0) * kl * kNr):
// 16 wide, the last one 8 wide when it holds at most 8 rows (q >= full); zeros past a.b.
void pack_rows(const Rows& a, int64_t q0, int64_t q1, int64_t full, int64_t k0, int64_t kl, float* scratch) {
  for (int64_t q = q0; q < q1; ++q) {
    float* dst = scratch + (q - q0) * kl * kNr;
    const int64_t n = std::min(kNr, a.b - q * kNr), width = q < full ? kNr : 8;
    const float* src = a.a + q * kNr * a.rs + k0 * a.ks;
    if (a.ks == 1) {  // rows contiguous: read along k
      for (int64_t c = 0; c < width; ++c) {
        for (int64_t k = 0; k < kl; ++k) dst[k * width + c] = c < n ? src[c * a.rs + k] : 0.0f;
      }
    } else {  // a transposed matrix: read along the rows
      for (int64_t k = 0; k < kl; ++k) {
        for (int64_t c = 0; c < width; ++c) dst[k * width + c] = c < n ? src[c * a.rs + k * a.ks] : 0.0f;
      }
    }
  }
}

// Row groups for lanes_tile that cost least: a group of R rows costs what kCost[R] says, per row in full tiles
// (5 and 6 rows keep both FMA pipes busy; fewer wait on the FMAs' latency: 2R accumulators for 8 in flight), so
// 20 rows are four 5s, 19 three 5s and a 4, 7 a 4 and a 3 (every b >= 20 is a sum of 5s and 6s alone).
const std::vector<int64_t>& lanes_groups(int64_t b) {
  static constexpr double kCost[7] = {0, 4.0, 2.2, 1.5, 1.2, 1.0, 1.0};  // per row, relative to a full tile
  thread_local int64_t last_b = -1;  // a layer asks for the same batch at every step: worked out once
  thread_local std::vector<int64_t> g;
  if (b == last_b) return g;
  std::vector<double> best(b + 1, 0.0);
  std::vector<int64_t> last(b + 1, 0);
  for (int64_t n = 1; n <= b; ++n) {
    best[n] = -1;
    for (int64_t r = 1; r <= std::min<int64_t>(6, n); ++r) {
      const double c = best[n - r] + r * kCost[r];
      if (best[n] < 0 || c < best[n]) best[n] = c, last[n] = r;
    }
  }
  g.clear();
  for (int64_t n = b; n > 0; n -= last[n]) g.push_back(last[n]);
  last_b = b;
  return g;
}

// o = a (a.b x K, its rows contiguous) @ a weight packed kLanes outputs wide (own_pack(w, t, kLanes)).
void lanes_product(const Rows& a, const Tensor& packed, const TileOut& o, int64_t M) {
#if defined(__AVX2__) && defined(__FMA__)
  TORCH_CHECK(a.ks == 1, "avx2: the outputs-on-lanes product reads rows with contiguous values");
  const int64_t P = packed.size(0), K = packed.size(1);
  const float* w = packed.data_ptr<float>();
  const std::vector<int64_t> groups = lanes_groups(a.b);  // a copy: the workers' threads ask for their own
  parallel_shares(P, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {  // a weight panel (K x 16: L1 at K <= 400, L2 above) meets every row
      const int64_t cols = std::min(kLanes, M - p * kLanes);
      int64_t b0 = 0;
      for (const int64_t R : groups) {
        lanes_tile_rows(R, w + p * K * kLanes, a.a + b0 * a.rs, a.rs, K, o, p * kLanes, b0, cols);
        b0 += R;
      }
    }
  });
#else
  TORCH_CHECK(false, "the avx2 backend was not built (no AVX2 and FMA)");
#endif
}

// o = a (a.b x K) @ the packed weight (M outputs, K = packed.size(1)). The products over a whole sequence (the
// weight gradient: its K is every row of the sequence) run in blocks: `kc` values of k (0: all) and `qb` row
// panels (0: all) at a time, so that a block of row panels stays in L2 while every weight panel passes by;
// `scratch` holds qb * kNr * kc floats (all: ceil(b / kNr) * kNr * K).
void own_product(const Rows& a, const Tensor& packed, const TileOut& o, int64_t M, float* scratch, int64_t kc = 0,
                 int64_t qb = 0) {
  if (packed.size(2) == kLanes) return lanes_product(a, packed, o, M);  // the layout says which tiles
#if defined(__AVX2__) && defined(__FMA__)
  const int64_t P = packed.size(0), K = packed.size(1), b = a.b, Q = (b + kNr - 1) / kNr;
  // a last row panel of at most 8 rows is packed 8 wide (half the cache lines of a 16-wide one: with two weight
  // panels it then fits L1 at the PTB layer's sizes) and takes two weight panels at once (tile_12x8)
  const int64_t tail = half_tail(b) ? 1 : 0, full = Q - tail;
  kc = kc > 0 ? kc : std::max<int64_t>(K, 1);
  qb = qb > 0 ? qb : std::max<int64_t>(Q, 1);
  const float* w = packed.data_ptr<float>();
  for (int64_t k0 = 0; k0 < K; k0 += kc) {
    const int64_t kl = std::min(kc, K - k0);
    const TileOut ok{o.p, o.ldc, o.acc || k0 > 0, o.by_output};
    for (int64_t q0 = 0; q0 < Q; q0 += qb) {
      const int64_t q1 = std::min(q0 + qb, Q), fend = std::min(q1, full);
      pack_rows(a, q0, q1, full, k0, kl, scratch);
      // pairs of weight panels: each runs over the block's full row panels while it sits in L1
      parallel_shares((P + 1) / 2, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t p = 2 * lo; p < std::min(2 * hi, P); p += 2) {
          const int64_t end = std::min(p + 2, P);
          for (int64_t pp = p; pp < end; ++pp) {
            for (int64_t q = q0; q < fend; ++q) {
              tile_6x16(w + (pp * K + k0) * kMr, scratch + (q - q0) * kl * kNr, kl, ok, pp * kMr, q * kNr,
                        std::min(kMr, M - pp * kMr), std::min(kNr, b - q * kNr));
            }
          }
          if (!tail || q1 != Q) continue;
          const float* wp = w + (p * K + k0) * kMr;
          tile_12x8(wp, end == p + 2 ? wp + K * kMr : wp, scratch + (full - q0) * kl * kNr, kl, ok, p * kMr,
                    full * kNr, std::min((end - p) * kMr, M - p * kMr), b % kNr);
        }
      });
    }
  }
#else
  TORCH_CHECK(false, "the avx2 backend was not built (no AVX2 and FMA)");
#endif
}

// The weight gradient's blocks: 512 rows of the sequence (k) and 8 row panels of 16 (16 KiB + 256 KiB).
constexpr int64_t kGradK = 512, kGradPanels = 8;

// d_w (G x C, row-major) = dG^T @ hx for dG (N x G) and hx (N x C), both row-major, by own_product: the rows
// operand is hx^T (C rows), the weight dG packed 512 rows at a time (G outputs), so that a tile's rows are runs
// of d_w's rows (by_output) and the packed copy stays small (G x 512 values).
void own_weight_grad(const Tensor& dG, const Tensor& hx, Tensor d_w) {
  const int64_t N = hx.size(0), G = dG.size(1), C = hx.size(1);
  if (N == 0) d_w.zero_();
  std::vector<float> scratch(kGradPanels * kNr * std::min(kGradK, std::max<int64_t>(N, 1)));
  for (int64_t k0 = 0; k0 < N; k0 += kGradK) {
    const int64_t kl = std::min(kGradK, N - k0);
    const Tensor packed = own_pack(dG.narrow(0, k0, kl), true);
    own_product(Rows{hx.data_ptr<float>() + k0 * C, C, 1, C}, packed, TileOut{d_w.data_ptr<float>(), C, k0 > 0, true},
                G, scratch.data(), 0, kGradPanels);
  }
}

// Whether a float32 call's per-step products are this file's own.
bool own_steps(bool dnnl) { return dnnl && !t_bf16 && gemm_state().backend == Backend::kAvx2; }

// Which orientation the step products of a batch of b rows take: "rows" on the lanes (tile_6x16, tile_12x8), or
// "outputs" (lanes_tile). Rows on the lanes run fastest where they fill the lanes; a batch that leaves more than
// a seventh of them empty (20 rows in 24 lanes: 64-70 GFLOP/s against 82-90 for outputs on the lanes at H=650 on
// one core of an AVX2 AMD, issue #46) takes the other. "auto" decides per batch; the others force one (tests,
// benchmarks).
enum TilesMode : int { kTilesAuto, kTilesRows, kTilesOutputs };
std::atomic<int>& avx2_tiles_mode() {  // atomic: set by a test or benchmark while another thread may run the layer
  static std::atomic<int> mode{kTilesAuto};
  return mode;
}

bool outputs_on_lanes(int64_t b) {
  const int mode = avx2_tiles_mode().load();
  if (mode != kTilesAuto) return mode == kTilesOutputs;
  const int64_t lanes = (b + kNr - 1) / kNr * kNr - (half_tail(b) ? 8 : 0);  // those the rows take on the lanes
  return b > 0 && 7 * b < 6 * lanes;
}

int64_t step_width(int64_t b) { return outputs_on_lanes(b) ? kLanes : kMr; }

bool set_avx2_tiles(const std::string& mode) {
  TORCH_CHECK(mode == "auto" || mode == "rows" || mode == "outputs", "avx2 tiles: auto, rows or outputs, got ", mode);
  avx2_tiles_mode() = mode == "rows" ? kTilesRows : mode == "outputs" ? kTilesOutputs : kTilesAuto;
  return true;
}

std::string avx2_tiles() {
  const int mode = avx2_tiles_mode().load();
  return mode == kTilesRows ? "rows" : mode == kTilesOutputs ? "outputs" : "auto";
}

// For benchmarks and the backend's timing: pack (own_pack) and one product (a: b x K) -> (b, M).
Tensor own_pack_weight(const Tensor& w, bool transposed, int64_t rows) {
  TORCH_CHECK(kOwnSteps && w.scalar_type() == at::kFloat && w.dim() == 2, "avx2: a 2-D float32 weight");
  return own_pack(w, transposed, step_width(rows));
}

Tensor own_matmul(const Tensor& a, const Tensor& packed, int64_t M) {
  TORCH_CHECK(kOwnSteps && a.scalar_type() == at::kFloat && a.dim() == 2 && a.size(1) == packed.size(1),
              "avx2: a float32 (b, K) input for a weight packed with K = ", packed.size(1));
  const Tensor ac = a.contiguous();
  const int64_t b = ac.size(0), K = ac.size(1);
  Tensor out = at::empty({b, M}, ac.options());
  std::vector<float> scratch((b + kNr - 1) / kNr * kNr * K);
  own_product(Rows{ac.data_ptr<float>(), b, K, 1}, packed, TileOut{out.data_ptr<float>(), M, false}, M,
              scratch.data());
  return out;
}

Tensor own_weight_gradient(const Tensor& dG, const Tensor& hx) {
  TORCH_CHECK(kOwnSteps && dG.scalar_type() == at::kFloat && hx.scalar_type() == at::kFloat && dG.dim() == 2 &&
                  hx.dim() == 2 && dG.size(0) == hx.size(0),
              "avx2: float32 (N, G) and (N, C) inputs");
  Tensor d_w = at::empty({dG.size(1), hx.size(1)}, dG.options());
  own_weight_grad(dG.contiguous(), hx.contiguous(), d_w);
  return d_w;
}

// ---------------------------------------------------------------------------------------------
// Element-wise step, one row (one sequence of the batch) at a time
// ---------------------------------------------------------------------------------------------

template <typename T>
inline T sigm(T x) {
  x = std::min(std::max(x, T(-40)), T(40));
  return T(1) / (T(1) + std::exp(-x));
}

template <typename T>
inline T tanh_fast(T x) {
  x = std::min(std::max(x, T(-20)), T(20));
  const T e = std::exp(T(2) * x);
  return (e - T(1)) / (e + T(1));
}

template <typename T>
void softmax_row(const T* a, const T* b, T* p, int64_t n) {
  T m = a[0] + b[0];
  for (int64_t k = 1; k < n; ++k) m = std::max(m, a[k] + b[k]);
  T s = 0;
  for (int64_t k = 0; k < n; ++k) {
    p[k] = std::exp(a[k] + b[k] - m);
    s += p[k];
  }
  const T inv = T(1) / s;
  for (int64_t k = 0; k < n; ++k) p[k] *= inv;
}

// mf = cumsum(pf); mi = suffix sum of pi, inclusive ('reverse') or exclusive ('paper').
template <typename T>
void master_gates(const T* pi, const T* pf, T* mi, T* mf, int64_t n, bool inclusive) {
  T s = 0;
  for (int64_t k = 0; k < n; ++k) {
    s += pf[k];
    mf[k] = s;
  }
  s = 0;
  for (int64_t k = n - 1; k >= 0; --k) {
    if (inclusive) {
      s += pi[k];
      mi[k] = s;
    } else {
      mi[k] = s;
      s += pi[k];
    }
  }
}

template <typename T>
void forward_row(const T* xp, const T* rec, const T* c_prev, T* act, T* c_new, T* h_new, T* dist,
                 T* scratch, int64_t n, int64_t C, bool inclusive) {
  const int64_t D = n * C;
  softmax_row(xp, rec, act, n);              // p_i
  softmax_row(xp + n, rec + n, act + n, n);  // p_f
  const T* gx = xp + 2 * n;
  const T* gr = rec + 2 * n;
  T* a = act + 2 * n;
  for (int64_t u = 0; u < D; ++u) a[u] = sigm(gx[u] + gr[u]);                    // o
  for (int64_t u = D; u < 2 * D; ++u) a[u] = tanh_fast(gx[u] + gr[u]);           // c^
  for (int64_t u = 2 * D; u < 4 * D; ++u) a[u] = sigm(gx[u] + gr[u]);            // i, f
  T* mi = scratch;
  T* mf = scratch + n;
  master_gates(act, act + n, mi, mf, n, inclusive);
  T smf = 0, smi = 0;
  const T* o = a;
  const T* ch = a + D;
  const T* ig = a + 2 * D;
  const T* fg = a + 3 * D;
  for (int64_t k = 0; k < n; ++k) {
    smf += mf[k];
    smi += mi[k];
    const T w = mf[k] * mi[k];
    const T fo = mf[k] - w, io = mi[k] - w;
    for (int64_t j = k * C; j < (k + 1) * C; ++j) {
      const T fh = fg[j] * w + fo;
      const T ih = ig[j] * w + io;
      c_new[j] = fh * c_prev[j] + ih * ch[j];
    }
  }
  for (int64_t u = 0; u < D; ++u) h_new[u] = o[u] * tanh_fast(c_new[u]);
  dist[0] = T(1) - smf / T(n);
  dist[1] = smi / T(n);
}

// dh_rec: gradient reaching h' through the recurrence (from step t+1 or from h_n);
// dc: in, the gradient of c'; out, the gradient of c (the previous cell).
// tanh(c') is recomputed from c' rather than saved: one (N, D) buffer less kept from forward to
// backward, for one vectorised pass over D values per row (scratch holds 4n + D values).
template <typename T>
void backward_row(const T* gout, const T* dh_rec, T* dc, const T* gdist, const T* act,
                  const T* c_prev, const T* c_new, T* dg, T* scratch, int64_t n, int64_t C,
                  bool inclusive) {
  const int64_t D = n * C;
  T* tc = scratch + 4 * n;
  for (int64_t u = 0; u < D; ++u) tc[u] = tanh_fast(c_new[u]);
  const T* pi = act;
  const T* pf = act + n;
  const T* o = act + 2 * n;
  const T* ch = o + D;
  const T* ig = ch + D;
  const T* fg = ig + D;
  T* mi = scratch;
  T* mf = scratch + n;
  T* dmi = scratch + 2 * n;
  T* dmf = scratch + 3 * n;
  master_gates(pi, pf, mi, mf, n, inclusive);
  T* dgo = dg + 2 * n;
  T* dgc = dgo + D;
  T* dgi = dgc + D;
  T* dgf = dgi + D;
  const T gdf = gdist ? gdist[0] : T(0);
  const T gdi = gdist ? gdist[1] : T(0);
  for (int64_t k = 0; k < n; ++k) {
    const T w = mf[k] * mi[k];
    const T fo = mf[k] - w, io = mi[k] - w;
    T acc_f = 0, acc_i = 0;
    for (int64_t j = k * C; j < (k + 1) * C; ++j) {
      const T dh = gout[j] + dh_rec[j];
      const T t = tc[j];
      const T dcu = dc[j] + dh * o[j] * (T(1) - t * t);
      const T fh = fg[j] * w + fo;
      const T ih = ig[j] * w + io;
      const T dfh = dcu * c_prev[j];
      const T dih = dcu * ch[j];
      dc[j] = dcu * fh;
      const T dw = dfh * (fg[j] - T(1)) + dih * (ig[j] - T(1));
      acc_f += dfh + dw * mi[k];
      acc_i += dih + dw * mf[k];
      dgo[j] = dh * t * o[j] * (T(1) - o[j]);
      dgc[j] = dcu * ih * (T(1) - ch[j] * ch[j]);
      dgi[j] = dih * w * ig[j] * (T(1) - ig[j]);
      dgf[j] = dfh * w * fg[j] * (T(1) - fg[j]);
    }
    dmf[k] = acc_f - gdf / T(n);
    dmi[k] = acc_i + gdi / T(n);
  }
  // mf = cumsum(pf)  =>  dpf_j = sum_{k >= j} dmf_k
  T s = 0;
  for (int64_t k = n - 1; k >= 0; --k) {
    s += dmf[k];
    dmf[k] = s;
  }
  // mi_k = sum_{j >= k} pi_j (inclusive) or sum_{j > k} (exclusive)
  //   =>  dpi_j = sum_{k <= j} dmi_k  or  sum_{k < j} dmi_k
  s = 0;
  for (int64_t k = 0; k < n; ++k) {
    if (inclusive) {
      s += dmi[k];
      dmi[k] = s;
    } else {
      const T v = dmi[k];
      dmi[k] = s;
      s += v;
    }
  }
  T sf = 0, si = 0;
  for (int64_t k = 0; k < n; ++k) {
    sf += dmf[k] * pf[k];
    si += dmi[k] * pi[k];
  }
  for (int64_t k = 0; k < n; ++k) {
    dg[n + k] = pf[k] * (dmf[k] - sf);
    dg[k] = pi[k] * (dmi[k] - si);
  }
}

// The kernel computes in the input's dtype (as it did through oneDNN, which autocast leaves alone):
// under torch.autocast the ATen products would come back in bfloat16, read by the step code as float.
using NoAutocast = c10::impl::ExcludeDispatchKeyGuard;

std::vector<int64_t> to_vector(const Tensor& batch_sizes) {
  auto bs = batch_sizes.to(at::kLong).contiguous();
  return std::vector<int64_t>(bs.data_ptr<int64_t>(), bs.data_ptr<int64_t>() + bs.numel());
}

int64_t grain_rows(int64_t D) { return std::max<int64_t>(1, 4096 / std::max<int64_t>(D, 1)); }

// ---------------------------------------------------------------------------------------------
// Whole-sequence forward and backward
// ---------------------------------------------------------------------------------------------

// act = x @ w_ih^T + bias, (N, G); with oneDNN in row blocks over a buffer of padded rows (the
// returned tensor is its first N rows).
Tensor input_projection(const Tensor& x, const Tensor& w_ih, const c10::optional<Tensor>& bias, bool dnnl) {
  if (!dnnl) return bias.has_value() ? at::addmm(*bias, x, w_ih.t()) : at::mm(x, w_ih.t());
  const int64_t N = x.size(0), G = w_ih.size(0);
  const auto blocks = row_blocks(N, true);
  const int64_t Np = padded_rows(blocks);
  Tensor xs = pad_rows(x, Np);
  // always accumulating onto the bias (or zeros): one primitive per block shape, not two
  Tensor act = pooled(kAct, {Np, G}, x.options());
  if (linear_route(dnnl)) {
    packed_blocks(xs, w_ih, bias, act, blocks);
    return act.narrow(0, 0, N);
  }
  if (bias.has_value()) {
    act.copy_(bias->expand({Np, G}));
  } else {
    act.zero_();
  }
  for (const auto& [s, r] : blocks) gemm(xs.narrow(0, s, r), w_ih.t(), act.narrow(0, s, r), true, true);
  return act.narrow(0, 0, N);
}

// Final states: a row's last step is the last t with bs_t > row.
std::pair<Tensor, Tensor> final_states(const std::vector<int64_t>& bs, const Tensor& out, const Tensor& cells) {
  const int64_t B = bs.empty() ? 0 : bs[0], D = out.size(1);
  Tensor h_n = at::empty({B, D}, out.options()), c_n = at::empty({B, D}, out.options());
  int64_t off = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    const int64_t next = t + 1 < bs.size() ? bs[t + 1] : 0;
    if (bs[t] > next) {
      h_n.narrow(0, next, bs[t] - next).copy_(out.narrow(0, off + next, bs[t] - next));
      c_n.narrow(0, next, bs[t] - next).copy_(cells.narrow(0, off + next, bs[t] - next));
    }
    off += bs[t];
  }
  return {h_n, c_n};
}

std::vector<Tensor> onlstm_forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                                   const c10::optional<Tensor>& bias, const Tensor& h0,
                                   const Tensor& c0, const Tensor& batch_sizes, int64_t chunk,
                                   bool inclusive, bool bf16) {
  NoAutocast no_autocast(c10::autocast_dispatch_keyset);
  Bf16Scope products(bf16 && x.scalar_type() == at::kFloat);
  const auto bs = to_vector(batch_sizes);
  const bool dnnl = use_dnnl(x) || t_bf16;  // bfloat16 products: rows bucketed as oneDNN's routes
  const int64_t N = x.size(0), G = w_hh.size(0), D = w_hh.size(1), n = D / chunk;
  const int64_t B = bs.empty() ? 0 : bs[0], Bp = dnnl ? bucket_rows(B) : B;
  // The input projection for all steps at once; each row is then overwritten in place by its
  // activations (forward_row reads a value before it writes the same position).
  Tensor act = input_projection(x, w_ih, bias, dnnl);
  // h @ whh_t with whh_t (D, G) contiguous is the fastest layout for the per-step products; the
  // transpose pays off over many steps, not for a single one (the prefix-tree scorer of syneval
  // feeds one step per call), which reads w_hh transposed in place.
  const bool own = own_steps(dnnl);  // float32 only (dnnl is)
  Tensor whh_own = own ? own_pack(w_hh, false, step_width(B)) : Tensor();
  Tensor whh_p = own ? Tensor() : pack_weight(w_hh, dnnl, bs.size());
  Tensor whh_t = own || whh_p.defined() ? Tensor() : bs.size() > 1 ? w_hh.t().contiguous() : w_hh.t();
  if (whh_t.defined()) whh_t = mm_operand(whh_t);  // rounded once, not at every step
  auto opts = x.options();
  // the row panels' scratch, for the rows-on-lanes tiles only (the packed width says which run)
  std::vector<float> scratch_own(own && whh_own.size(2) == kMr ? (B + kNr - 1) / kNr * kNr * D : 0);
  Tensor rec_buf = at::empty({Bp, G}, opts);  // one buffer for every step's recurrent product (plain)
  // With oneDNN a step's product reads bucket_rows(b) rows of h: the rows past b (the next step's,
  // then Bp spare rows) are zeros or finite values, and their products are thrown away.
  Tensor out_buf = pooled(kOut, {dnnl ? N + Bp : N, D}, opts);
  if (dnnl) out_buf.narrow(0, N, Bp).zero_();
  Tensor out = out_buf.narrow(0, 0, N);
  Tensor cells = pooled(kCells, {N, D}, opts);
  Tensor dist = at::empty({N, 2}, opts);
  Tensor h0c = pad_rows(h0, Bp), c0c = c0.contiguous();
  // bfloat16 products: each h_t is also kept in bfloat16, rounded by the row loop, for the next step's product
  // (fresh zeros: the padded rows a product reads past a step's own are zeros or finite)
  const bool b16 = t_bf16;
  Tensor h16 = b16 ? at::zeros({N + Bp, D}, opts.dtype(at::kBFloat16)) : Tensor();
  Tensor h0c16 = b16 ? h0c.to(at::kBFloat16) : Tensor();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "onlstm_forward", [&] {
    int64_t off = 0, prev = 0;
    for (size_t t = 0; t < bs.size(); ++t) {
      const int64_t b = bs[t], bp = dnnl ? bucket_rows(b) : b;
      // the padded rows it reads that no step has written yet (out_buf is reused): zeros
      if (t > 0 && prev + bp > off) out_buf.narrow(0, off, prev + bp - off).zero_();
      Tensor h_prev = t == 0 ? h0c.narrow(0, 0, bp) : out_buf.narrow(0, prev, bp);
      Tensor rec16 = b16 ? product_bf16(t == 0 ? h0c16.narrow(0, 0, bp) : h16.narrow(0, prev, bp), whh_p, whh_t)
                         : Tensor();
      Tensor rec = whh_p.defined() && !b16 ? packed_product(h_prev, whh_p) : rec_buf;
      if (own) {  // float32 only; under bfloat16 rec16 holds the product and the row loop widens it
        own_product(Rows{h_prev.data_ptr<float>(), b, D, 1}, whh_own, TileOut{rec.data_ptr<float>(), G, false}, G,
                    scratch_own.data());
      } else if (!whh_p.defined() && !b16) {
        gemm(h_prev, whh_t, rec.narrow(0, 0, bp), false, dnnl);
      }
      const scalar_t* c_prev = (t == 0 ? c0c.data_ptr<scalar_t>() : cells.data_ptr<scalar_t>() + prev * D);
      const scalar_t* xp_p = act.data_ptr<scalar_t>() + off * G;
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      scalar_t* act_p = act.data_ptr<scalar_t>() + off * G;
      scalar_t* c_p = cells.data_ptr<scalar_t>() + off * D;
      scalar_t* h_p = out.data_ptr<scalar_t>() + off * D;
      scalar_t* d_p = dist.data_ptr<scalar_t>() + off * 2;
      const at::BFloat16* rec16_p = b16 ? rec16.data_ptr<at::BFloat16>() : nullptr;
      at::BFloat16* h16_p = b16 ? h16.data_ptr<at::BFloat16>() + off * D : nullptr;
      at::parallel_for(0, b, grain_rows(D), [&](int64_t lo, int64_t hi) {
        std::vector<scalar_t> scratch(2 * n + (b16 ? G : 0));
        for (int64_t r = lo; r < hi; ++r) {
          const scalar_t* rec_r = rec_p + r * G;
          if (b16) {  // this row of the step's product, widened here rather than in a pass of its own
            widen_row(rec16_p + r * G, scratch.data() + 2 * n, G);
            rec_r = scratch.data() + 2 * n;
          }
          forward_row(xp_p + r * G, rec_r, c_prev + r * D, act_p + r * G, c_p + r * D,
                      h_p + r * D, d_p + r * 2, scratch.data(), n, chunk, inclusive);
          if (b16) round_row(h_p + r * D, h16_p + r * D, D);
        }
      });
      prev = off;
      off += b;
    }
  });
  auto [h_n, c_n] = final_states(bs, out, cells);
  return {out, h_n, c_n, dist, act, cells};
}

// Weight gradients with one product over the sequence, dG^T [h_{t-1} | x] -> (G, D + I), and
// d_x = dG @ w_ih. dG has at least padded_rows(row_blocks(N)) rows, zeros past N.
std::pair<Tensor, Tensor> weight_and_input_grads(const Tensor& dG, const Tensor& x, const Tensor& w_ih,
                                                 const Tensor& h0, const Tensor& out,
                                                 const std::vector<int64_t>& bs, bool dnnl) {
  const int64_t N = x.size(0), I = x.size(1), D = out.size(1), G = w_ih.size(0);
  const auto blocks = row_blocks(N, dnnl);
  const int64_t Np = std::max(padded_rows(blocks), N);
  Tensor hx = pooled(kHx, {Np, D + I}, x.options());
  if (Np > N) hx.narrow(0, N, Np - N).zero_();  // padded rows add zero to the weight gradients
  int64_t off = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    Tensor h_prev = t == 0 ? h0.narrow(0, 0, bs[0]) : out.narrow(0, off - bs[t - 1], bs[t]);
    hx.narrow(1, 0, D).narrow(0, off, bs[t]).copy_(h_prev);
    off += bs[t];
  }
  hx.narrow(1, D, I).narrow(0, 0, N).copy_(x);
  Tensor w_ih_c = w_ih.contiguous();
  if (!dnnl) return {at::mm(dG.t(), hx), at::mm(dG, w_ih_c)};
  const bool own = own_steps(dnnl);  // the weight gradient by own_product too
  Tensor d_w = pooled(kDw, {G, D + I}, x.options());
  if (own) {
    own_weight_grad(dG.narrow(0, 0, N), hx.narrow(0, 0, N), d_w);
  } else {
    d_w.zero_();
  }
  Tensor d_x = pooled(kDx, {Np, I}, x.options());
  const bool linear = linear_route(dnnl);
  if (linear) packed_blocks(dG, w_ih_c.t(), std::nullopt, d_x, blocks);  // d_x = dG @ w_ih
  for (const auto& [s, r] : blocks) {
    if (!own) gemm(dG.narrow(0, s, r).t(), hx.narrow(0, s, r), d_w, true, true);
    if (!linear) gemm(dG.narrow(0, s, r), w_ih_c, d_x.narrow(0, s, r), false, true);
  }
  return {d_w, d_x.narrow(0, 0, N)};
}

std::vector<Tensor> onlstm_backward(const Tensor& grad_out, const Tensor& grad_hn,
                                    const Tensor& grad_cn, const c10::optional<Tensor>& grad_dist,
                                    const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                                    const Tensor& h0, const Tensor& c0, const Tensor& batch_sizes,
                                    const Tensor& act, const Tensor& cells,
                                    const Tensor& out, int64_t chunk, bool inclusive, bool bf16) {
  NoAutocast no_autocast(c10::autocast_dispatch_keyset);
  Bf16Scope products(bf16 && x.scalar_type() == at::kFloat);
  const auto bs = to_vector(batch_sizes);
  const bool dnnl = use_dnnl(x) || t_bf16;
  const int64_t N = x.size(0), G = w_hh.size(0), D = w_hh.size(1), n = D / chunk;
  const int64_t B = bs.empty() ? 0 : bs[0], Bp = dnnl ? bucket_rows(B) : B;
  const int64_t T = bs.size();
  // dh = dg @ w_hh: packed as the linear weight w_hh^T, or read (G, D) as it is stored
  const bool own = own_steps(dnnl);
  Tensor whh_own = own ? own_pack(w_hh, true, step_width(B)) : Tensor();
  Tensor whh_p = own ? Tensor() : pack_weight(w_hh.t(), dnnl, T);
  Tensor whh = whh_p.defined() ? Tensor() : mm_operand(w_hh.contiguous());
  std::vector<float> scratch_own(own && whh_own.size(2) == kMr ? (B + kNr - 1) / kNr * kNr * G : 0);
  auto opts = x.options();
  // With oneDNN, spare zero rows: a step's product reads bucket_rows(b) rows (the ones past b are
  // the next step's or these), and the blocked products over the sequence read padded blocks.
  const int64_t rows = dnnl ? std::max(N + Bp, padded_rows(row_blocks(N, true))) : N;
  Tensor dG_buf = pooled(kGates, {rows, G}, opts);
  if (rows > N) dG_buf.narrow(0, N, rows - N).zero_();
  Tensor dG = dG_buf.narrow(0, 0, N);
  // bfloat16 products: the gate gradients also in bfloat16, rounded by the row loop, for the step products and
  // the sequence-wide ones (fresh zeros past the written rows, as dG_buf's)
  const bool b16 = t_bf16;
  Tensor dG16 = b16 ? at::zeros({rows, G}, opts.dtype(at::kBFloat16)) : Tensor();
  at::BFloat16* dG16_p = b16 ? dG16.data_ptr<at::BFloat16>() : nullptr;
  Tensor dh = grad_hn.contiguous().clone();
  Tensor dh_step = dnnl ? at::empty({Bp, D}, opts) : Tensor();  // padded rows must not reach dh
  Tensor dc = grad_cn.contiguous().clone();
  Tensor gout = grad_out.contiguous();
  Tensor gdist;
  if (grad_dist.has_value()) gdist = grad_dist->contiguous();
  Tensor c0c = c0.contiguous();
  std::vector<int64_t> offs(T + 1, 0);
  for (int64_t t = 0; t < T; ++t) offs[t + 1] = offs[t] + bs[t];
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "onlstm_backward", [&] {
    for (int64_t t = T - 1; t >= 0; --t) {
      const int64_t b = bs[t], off = offs[t];
      const scalar_t* c_prev = t == 0 ? c0c.data_ptr<scalar_t>() : cells.data_ptr<scalar_t>() + offs[t - 1] * D;
      const scalar_t* go = gout.data_ptr<scalar_t>() + off * D;
      const scalar_t* gd = gdist.defined() ? gdist.data_ptr<scalar_t>() + off * 2 : nullptr;
      const scalar_t* a = act.data_ptr<scalar_t>() + off * G;
      const scalar_t* c_cur = cells.data_ptr<scalar_t>() + off * D;
      scalar_t* dg = dG.data_ptr<scalar_t>() + off * G;
      scalar_t* dh_p = dh.data_ptr<scalar_t>();
      scalar_t* dc_p = dc.data_ptr<scalar_t>();
      at::parallel_for(0, b, grain_rows(D), [&](int64_t lo, int64_t hi) {
        std::vector<scalar_t> scratch(4 * n + D);
        for (int64_t r = lo; r < hi; ++r) {
          backward_row(go + r * D, dh_p + r * D, dc_p + r * D, gd ? gd + r * 2 : nullptr,
                       a + r * G, c_prev + r * D, c_cur + r * D, dg + r * G, scratch.data(), n,
                       chunk, inclusive);
          if (b16) round_row(dg + r * G, dG16_p + (off + r) * G, G);
        }
      });
      // The rows of the sequences that end before step t keep the gradient from h_n.
      if (b16) {
        Tensor res = product_bf16(dG16.narrow(0, off, bucket_rows(b)), whh_p, whh);
        dh.narrow(0, 0, b).copy_(res.narrow(0, 0, b));
      } else if (own) {
        own_product(Rows{dG.data_ptr<float>() + off * G, b, G, 1}, whh_own, TileOut{dh.data_ptr<float>(), D, false},
                    D, scratch_own.data());
      } else if (dnnl) {
        const int64_t bp = bucket_rows(b);
        if (whh_p.defined()) {
          dh.narrow(0, 0, b).copy_(packed_product(dG_buf.narrow(0, off, bp), whh_p).narrow(0, 0, b));
        } else {
          gemm(dG_buf.narrow(0, off, bp), whh, dh_step.narrow(0, 0, bp), false, true);
          dh.narrow(0, 0, b).copy_(dh_step.narrow(0, 0, b));
        }
      } else {
        gemm(dG.narrow(0, off, b), whh, dh.narrow(0, 0, b), false, false);
      }
    }
  });
  auto [d_w, d_x] = weight_and_input_grads(b16 ? dG16 : dnnl ? dG_buf : dG, x, w_ih, h0, out, bs, dnnl);
  const int64_t I = x.size(1);
  return {d_x, d_w.narrow(1, D, I), d_w.narrow(1, 0, D), dG.sum(0), dh, dc};
}

// row_blocks for the tests, flat: first row, rows, first row, rows, ...
std::vector<int64_t> row_blocks_flat(int64_t N, bool dnnl) {
  std::vector<int64_t> flat;
  for (const auto& [first, rows] : row_blocks(N, dnnl)) flat.insert(flat.end(), {first, rows});
  return flat;
}

}  // namespace

// The module's functions as operators of the namespace TORCH_EXTENSION_NAME (torch.ops.<that name>.forward, ...):
// each build has its own name, so a native and a portable build can live in one process. The macro in between
// expands the name before TORCH_LIBRARY pastes it.
#define ONLSTM_LIBRARY(ns, m) TORCH_LIBRARY(ns, m)
ONLSTM_LIBRARY(TORCH_EXTENSION_NAME, m) {
  // the layer over a packed sequence: forward -> out, h_n, c_n, dist, act, cells; backward -> the inputs' grads
  m.def("forward(Tensor x, Tensor w_ih, Tensor w_hh, Tensor? bias, Tensor h0, Tensor c0, Tensor batch_sizes, "
        "int chunk, bool inclusive, bool bf16) -> Tensor[]", &onlstm_forward);
  m.def("backward(Tensor grad_out, Tensor grad_hn, Tensor grad_cn, Tensor? grad_dist, Tensor x, Tensor w_ih, "
        "Tensor w_hh, Tensor h0, Tensor c0, Tensor batch_sizes, Tensor act, Tensor cells, Tensor out, int chunk, "
        "bool inclusive, bool bf16) -> Tensor[]", &onlstm_backward);
  // the matrix-product backends: which runs (onednn, linear, avx2 or mkl), which can, and why oneDNN cannot
  m.def("gemm_backend() -> str", &gemm_backend);
  m.def("gemm_backends() -> str[]", &gemm_backends);
  m.def("gemm_why_not_onednn() -> str", &gemm_why_not_onednn);
  m.def("set_gemm_backend(str backend) -> bool", &set_gemm_backend);  // false if it does not run here
  m.def("matmul(Tensor a, Tensor b, Tensor(a!) c, str backend, bool accumulate=False) -> ()", &matmul);  // benchmarks
  m.def("packed_steps() -> bool", &packed_steps);  // the step products read a packed (oneDNN-blocked) weight
  m.def("set_packed_steps(bool on) -> bool", &set_packed_steps);
  // bfloat16 products: why they cannot run here (empty if they can), and on packed weights or not
  m.def("bf16_why_not() -> str", &bf16_why_not);
  m.def("bf16_packed() -> bool", &bf16_packed);
  m.def("set_bf16_packed(bool on) -> bool", &set_bf16_packed);
  // large buffers kept from call to call: on or off, and [buffers held, of which free, bytes held]
  m.def("set_buffer_pool(bool on) -> ()", &set_buffer_pool);
  m.def("buffer_pool_stats() -> int[]", &buffer_pool_stats);
  m.def("bucket_rows(int m) -> int", &bucket_rows);  // the padded row count oneDNN's products use for m rows
  m.def("row_blocks(int n, bool dnnl) -> int[]", &row_blocks_flat);
  // the avx2 backend's own products: a weight packed for batches of `rows` rows (transposed: for a @ w), a @ w^T
  // (or a @ w) with M outputs, dG^T @ hx; and the tiles' orientation (auto, by the batch; rows; outputs)
  m.def("avx2_pack(Tensor w, bool transposed, int rows) -> Tensor", &own_pack_weight);
  m.def("avx2_matmul(Tensor a, Tensor packed, int M) -> Tensor", &own_matmul);
  m.def("avx2_weight_grad(Tensor dG, Tensor hx) -> Tensor", &own_weight_gradient);
  m.def("set_avx2_tiles(str mode) -> bool", &set_avx2_tiles);
  m.def("avx2_tiles() -> str", &avx2_tiles);
}
