// Fused ON-LSTM layer for the CPU: a whole sequence (one layer, one direction) per call, with a
// backward pass written by hand.  Built on first use by onlstm/nn/cpp_kernel.py.
//
// Data layout is PyTorch's packed layout: the N = sum_t bs_t rows of step t lie at
// [off_t, off_t + bs_t), bs_t non-increasing (a padded (T, B) batch is the case bs_t = B).
// Pre-activation columns (G = 2n + 4D): [l_i (n) | l_f (n) | o (D) | c^ (D) | i (D) | f (D)].
// Saved activations use the same columns: [p_i | p_f | sigm(o) | tanh(c^) | sigm(i) | sigm(f)],
// where p_* are the softmax outputs of the master-gate logits.
//
// Matrix products: at::mm / at::addmm (MKL or the BLAS torch was built with), the recurrent weight
// transposed once per call so that every per-step product reads it without a transpose. Not
// oneDNN: its linear builds and keeps a primitive and a primitive descriptor (~0.6 MiB together)
// for every new product shape, in two caches of 1,024 entries each, and packed sequences bring new
// shapes with every batch (each step's batch size, each batch's row count); the resident memory
// grew by gigabytes (issue #25). BLAS keeps nothing per shape and was as fast on these shapes.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
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

std::vector<Tensor> onlstm_forward(const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                                   const c10::optional<Tensor>& bias, const Tensor& h0,
                                   const Tensor& c0, const Tensor& batch_sizes, int64_t chunk,
                                   bool inclusive) {
  NoAutocast no_autocast(c10::autocast_dispatch_keyset);
  const auto bs = to_vector(batch_sizes);
  const int64_t N = x.size(0), G = w_hh.size(0), D = w_hh.size(1), n = D / chunk;
  const int64_t B = bs.empty() ? 0 : bs[0];
  // The input projection for all steps at once; each row is then overwritten in place by its
  // activations (forward_row reads a value before it writes the same position).
  Tensor act = bias.has_value() ? at::addmm(*bias, x, w_ih.t()) : at::mm(x, w_ih.t());  // (N, G)
  // h @ whh_t with whh_t (D, G) contiguous is the fastest layout for the per-step products; the
  // transpose pays off over many steps, not for a single one (the prefix-tree scorer of syneval
  // feeds one step per call), which reads w_hh transposed in place.
  Tensor whh_t = bs.size() > 1 ? w_hh.t().contiguous() : w_hh.t();
  auto opts = x.options();
  Tensor rec = at::empty({B, G}, opts);  // one buffer for every step's recurrent product
  Tensor out = at::empty({N, D}, opts);
  Tensor cells = at::empty({N, D}, opts);
  Tensor dist = at::empty({N, 2}, opts);
  Tensor h0c = h0.contiguous(), c0c = c0.contiguous();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "onlstm_forward", [&] {
    int64_t off = 0, prev = 0;
    for (size_t t = 0; t < bs.size(); ++t) {
      const int64_t b = bs[t];
      Tensor h_prev = t == 0 ? h0c.narrow(0, 0, b) : out.narrow(0, prev, b);
      Tensor rec_t = rec.narrow(0, 0, b);  // (b, G), contiguous rows
      at::mm_out(rec_t, h_prev, whh_t);
      const scalar_t* c_prev = (t == 0 ? c0c.data_ptr<scalar_t>() : cells.data_ptr<scalar_t>() + prev * D);
      const scalar_t* xp_p = act.data_ptr<scalar_t>() + off * G;
      const scalar_t* rec_p = rec.data_ptr<scalar_t>();
      scalar_t* act_p = act.data_ptr<scalar_t>() + off * G;
      scalar_t* c_p = cells.data_ptr<scalar_t>() + off * D;
      scalar_t* h_p = out.data_ptr<scalar_t>() + off * D;
      scalar_t* d_p = dist.data_ptr<scalar_t>() + off * 2;
      at::parallel_for(0, b, grain_rows(D), [&](int64_t lo, int64_t hi) {
        std::vector<scalar_t> scratch(2 * n);
        for (int64_t r = lo; r < hi; ++r) {
          forward_row(xp_p + r * G, rec_p + r * G, c_prev + r * D, act_p + r * G, c_p + r * D,
                      h_p + r * D, d_p + r * 2, scratch.data(), n, chunk, inclusive);
        }
      });
      prev = off;
      off += b;
    }
  });
  // Final states: a row's last step is the last t with bs_t > row.
  Tensor h_n = at::empty({B, D}, opts), c_n = at::empty({B, D}, opts);
  int64_t off = 0;
  for (size_t t = 0; t < bs.size(); ++t) {
    const int64_t next = t + 1 < bs.size() ? bs[t + 1] : 0;
    if (bs[t] > next) {
      h_n.narrow(0, next, bs[t] - next).copy_(out.narrow(0, off + next, bs[t] - next));
      c_n.narrow(0, next, bs[t] - next).copy_(cells.narrow(0, off + next, bs[t] - next));
    }
    off += bs[t];
  }
  return {out, h_n, c_n, dist, act, cells};
}

std::vector<Tensor> onlstm_backward(const Tensor& grad_out, const Tensor& grad_hn,
                                    const Tensor& grad_cn, const c10::optional<Tensor>& grad_dist,
                                    const Tensor& x, const Tensor& w_ih, const Tensor& w_hh,
                                    const Tensor& h0, const Tensor& c0, const Tensor& batch_sizes,
                                    const Tensor& act, const Tensor& cells,
                                    const Tensor& out, int64_t chunk, bool inclusive) {
  NoAutocast no_autocast(c10::autocast_dispatch_keyset);
  const auto bs = to_vector(batch_sizes);
  const int64_t N = x.size(0), G = w_hh.size(0), D = w_hh.size(1), n = D / chunk;
  const int64_t B = bs.empty() ? 0 : bs[0];
  const int64_t T = bs.size();
  Tensor whh = w_hh.contiguous();  // dh = dg @ w_hh reads (G, D) as it is stored
  auto opts = x.options();
  Tensor dG = at::empty({N, G}, opts);
  Tensor dh = grad_hn.contiguous().clone();
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
        }
      });
      // The rows of the sequences that end before step t keep the gradient from h_n.
      Tensor dh_t = dh.narrow(0, 0, b);
      at::mm_out(dh_t, dG.narrow(0, off, b), whh);
    }
  });
  // Weight gradients with one product: dG^T [h_{t-1} | x]  ->  (G, D + I).
  const int64_t I = x.size(1);
  Tensor hx = at::empty({N, D + I}, opts);
  if (T > 0) hx.narrow(1, 0, D).narrow(0, 0, bs[0]).copy_(h0.narrow(0, 0, bs[0]));
  for (int64_t t = 1; t < T; ++t)
    hx.narrow(1, 0, D).narrow(0, offs[t], bs[t]).copy_(out.narrow(0, offs[t - 1], bs[t]));
  hx.narrow(1, D, I).copy_(x);
  Tensor d_w = at::mm(dG.t(), hx);
  Tensor d_x = at::mm(dG, w_ih.contiguous());
  Tensor d_whh = d_w.narrow(1, 0, D);
  Tensor d_wih = d_w.narrow(1, D, I);
  Tensor d_b = dG.sum(0);
  return {d_x, d_wih, d_whh, d_b, dh, dc};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &onlstm_forward, "ON-LSTM layer forward over a packed sequence");
  m.def("backward", &onlstm_backward, "ON-LSTM layer backward over a packed sequence");
}
