#include "garden/kernels/convolution.h"

#include "garden/kernels/autocast.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <dlfcn.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <utility>
#include <vector>

// oneDNN's C API, declared by its own headers (Debian's libdnnl-dev) and
// bound at run time in the library LibTorch loaded: Garden never links
// oneDNN itself, so a LibTorch that carries its own copy inside (pytorch.org's)
// is not given a second one. Without the headers, or with another major
// version, every convolution goes to LibTorch.
#if __has_include(<oneapi/dnnl/dnnl.h>) && __has_include(<oneapi/dnnl/dnnl_version.h>)
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_version.h>
#if DNNL_VERSION_MAJOR == 2
#define GARDEN_HAVE_WINOGRAD 1
#endif
#endif

namespace garden::kernels {

// Named, not anonymous: the kernels build in batches of several files.
namespace convolution_detail {

std::atomic<ConvolutionAlgorithm> g_algorithm{ConvolutionAlgorithm::kAuto};

// The operands conv2d can give oneDNN: float32 CPU tensors without autocast,
// a 3x3 kernel at stride 1 keeping the size, one group.
bool eligible(const at::Tensor& x, const at::Tensor& weight, int64_t stride, int64_t padding) {
  return x.defined() && weight.defined() && x.device().is_cpu() && weight.device().is_cpu() &&
         x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat && x.dim() == 4 &&
         weight.dim() == 4 && weight.size(2) == 3 && weight.size(3) == 3 && stride == 1 &&
         padding == 1 && weight.size(1) == x.size(1) && x.numel() > 0 && weight.numel() > 0 &&
         !autocast_on(x.device());
}

#ifdef GARDEN_HAVE_WINOGRAD

// The C functions used, bound with dlsym: null members mean oneDNN is absent.
struct Api {
  decltype(&::dnnl_version) version = nullptr;
  decltype(&::dnnl_engine_create) engine_create = nullptr;
  decltype(&::dnnl_stream_create) stream_create = nullptr;
  decltype(&::dnnl_stream_wait) stream_wait = nullptr;
  decltype(&::dnnl_stream_destroy) stream_destroy = nullptr;
  decltype(&::dnnl_memory_desc_init_by_strides) md_init_by_strides = nullptr;
  decltype(&::dnnl_memory_desc_init_by_tag) md_init_by_tag = nullptr;
  decltype(&::dnnl_memory_desc_equal) md_equal = nullptr;
  decltype(&::dnnl_memory_desc_get_size) md_get_size = nullptr;
  decltype(&::dnnl_convolution_forward_desc_init) forward_desc_init = nullptr;
  decltype(&::dnnl_convolution_backward_data_desc_init) backward_data_desc_init = nullptr;
  decltype(&::dnnl_convolution_backward_weights_desc_init) backward_weights_desc_init = nullptr;
  decltype(&::dnnl_primitive_desc_create) pd_create = nullptr;
  decltype(&::dnnl_primitive_desc_query_md) pd_query_md = nullptr;
  decltype(&::dnnl_primitive_desc_query) pd_query = nullptr;
  decltype(&::dnnl_primitive_desc_destroy) pd_destroy = nullptr;
  decltype(&::dnnl_reorder_primitive_desc_create) reorder_pd_create = nullptr;
  decltype(&::dnnl_primitive_create) primitive_create = nullptr;
  decltype(&::dnnl_primitive_execute) primitive_execute = nullptr;
  decltype(&::dnnl_primitive_destroy) primitive_destroy = nullptr;
  decltype(&::dnnl_memory_create) memory_create = nullptr;
  decltype(&::dnnl_memory_destroy) memory_destroy = nullptr;

  template <typename F>
  static bool bind(F& f, const char* name) {
    f = reinterpret_cast<F>(dlsym(RTLD_DEFAULT, name));
    return f != nullptr;
  }
  bool bind_all() {
    return bind(version, "dnnl_version") && bind(engine_create, "dnnl_engine_create") &&
           bind(stream_create, "dnnl_stream_create") && bind(stream_wait, "dnnl_stream_wait") &&
           bind(stream_destroy, "dnnl_stream_destroy") &&
           bind(md_init_by_strides, "dnnl_memory_desc_init_by_strides") &&
           bind(md_init_by_tag, "dnnl_memory_desc_init_by_tag") &&
           bind(md_equal, "dnnl_memory_desc_equal") &&
           bind(md_get_size, "dnnl_memory_desc_get_size") &&
           bind(forward_desc_init, "dnnl_convolution_forward_desc_init") &&
           bind(backward_data_desc_init, "dnnl_convolution_backward_data_desc_init") &&
           bind(backward_weights_desc_init, "dnnl_convolution_backward_weights_desc_init") &&
           bind(pd_create, "dnnl_primitive_desc_create") &&
           bind(pd_query_md, "dnnl_primitive_desc_query_md") &&
           bind(pd_query, "dnnl_primitive_desc_query") &&
           bind(pd_destroy, "dnnl_primitive_desc_destroy") &&
           bind(reorder_pd_create, "dnnl_reorder_primitive_desc_create") &&
           bind(primitive_create, "dnnl_primitive_create") &&
           bind(primitive_execute, "dnnl_primitive_execute") &&
           bind(primitive_destroy, "dnnl_primitive_destroy") &&
           bind(memory_create, "dnnl_memory_create") && bind(memory_destroy, "dnnl_memory_destroy");
  }
};

void check(dnnl_status_t status, const char* what) {
  if (status != dnnl_success)
    throw std::runtime_error(std::string("oneDNN ") + what + " failed (status " +
                             std::to_string(static_cast<int>(status)) + ")");
}

struct PdDeleter {
  const Api* api;
  void operator()(dnnl_primitive_desc_t pd) const { api->pd_destroy(pd); }
};
struct PrimitiveDeleter {
  const Api* api;
  void operator()(dnnl_primitive_t p) const { api->primitive_destroy(p); }
};
using Pd = std::unique_ptr<std::remove_pointer_t<dnnl_primitive_desc_t>, PdDeleter>;
using Primitive = std::unique_ptr<std::remove_pointer_t<dnnl_primitive_t>, PrimitiveDeleter>;

// The process's oneDNN: the API, one CPU engine, and why Winograd cannot
// run ("" when it can).
struct Onednn {
  Api api;
  dnnl_engine_t engine = nullptr;
  std::string unavailable;
};

dnnl_memory_desc_t md_of(const Api& api, const at::Tensor& t) {
  dnnl_memory_desc_t md;
  std::memset(&md, 0, sizeof(md));
  dnnl_dims_t dims, strides;
  for (int64_t i = 0; i < t.dim(); ++i) {
    dims[i] = t.size(i);
    strides[i] = t.stride(i);
  }
  check(api.md_init_by_strides(&md, static_cast<int>(t.dim()), dims, dnnl_f32, strides),
        "memory_desc_init_by_strides");
  return md;
}

dnnl_memory_desc_t any_md(const Api& api, int64_t a, int64_t b, int64_t c, int64_t d) {
  dnnl_memory_desc_t md;
  std::memset(&md, 0, sizeof(md));
  dnnl_dims_t dims = {a, b, c, d};
  check(api.md_init_by_tag(&md, 4, dims, dnnl_f32, dnnl_format_tag_any), "memory_desc_init_by_tag");
  return md;
}

// A convolution's primitive descriptor, or null where oneDNN has no
// implementation for it.
Pd make_pd(const Onednn& o, const void* op_desc, const_dnnl_primitive_desc_t hint) {
  dnnl_primitive_desc_t pd = nullptr;
  if (o.api.pd_create(&pd, op_desc, nullptr, o.engine, hint) != dnnl_success) pd = nullptr;
  return Pd(pd, PdDeleter{&o.api});
}

std::string impl_name(const Onednn& o, const_dnnl_primitive_desc_t pd) {
  const char* name = nullptr;
  if (o.api.pd_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name) return "";
  return name;
}

Primitive make_primitive(const Onednn& o, const_dnnl_primitive_desc_t pd) {
  dnnl_primitive_t p = nullptr;
  check(o.api.primitive_create(&p, pd), "primitive_create");
  return Primitive(p, PrimitiveDeleter{&o.api});
}

struct ConvDescs {
  dnnl_convolution_desc_t forward, backward_data, backward_weights;
};

// The three convolution descriptors of a 3x3, stride-1, same-size layer.
ConvDescs conv_descs(const Api& api, dnnl_alg_kind_t alg, int64_t n, int64_t c, int64_t h,
                     int64_t w, int64_t o) {
  const dnnl_memory_desc_t src = any_md(api, n, c, h, w);
  const dnnl_memory_desc_t weights = any_md(api, o, c, 3, 3);
  const dnnl_memory_desc_t dst = any_md(api, n, o, h, w);
  dnnl_dims_t strides = {1, 1}, pad = {1, 1};
  ConvDescs d;
  check(api.forward_desc_init(&d.forward, dnnl_forward_training, alg, &src, &weights, nullptr, &dst,
                              strides, pad, pad),
        "convolution_forward_desc_init");
  check(api.backward_data_desc_init(&d.backward_data, alg, &src, &weights, &dst, strides, pad, pad),
        "convolution_backward_data_desc_init");
  check(api.backward_weights_desc_init(&d.backward_weights, alg, &src, &weights, nullptr, &dst,
                                       strides, pad, pad),
        "convolution_backward_weights_desc_init");
  return d;
}

const Onednn& onednn() {
  static const Onednn instance = [] {
    Onednn o;
    if (!o.api.bind_all()) {
      o.unavailable =
          "this LibTorch did not load oneDNN as a shared library (Debian's loads libdnnl.so.2)";
      return o;
    }
    const dnnl_version_t* v = o.api.version();
    if (v->major != DNNL_VERSION_MAJOR) {
      o.unavailable = "the loaded oneDNN is " + std::to_string(v->major) + "." +
                      std::to_string(v->minor) + ", Garden's Winograd calls need " +
                      std::to_string(DNNL_VERSION_MAJOR) + ".x";
      return o;
    }
    if (o.api.engine_create(&o.engine, dnnl_cpu, 0) != dnnl_success) {
      o.unavailable = "oneDNN could not create its CPU engine";
      return o;
    }
    // The probe: a layer of ResNet-18 at a training batch.
    const ConvDescs d = conv_descs(o.api, dnnl_convolution_winograd, 32, 64, 28, 28, 64);
    if (!make_pd(o, &d.forward, nullptr))
      o.unavailable = "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                      " has no Winograd convolution for this CPU (it needs AVX-512)";
    return o;
  }();
  return instance;
}

// One layer shape's primitives. The backward ones are made on the first
// backward pass.
struct Plan {
  bool winograd = false;  // oneDNN chose Winograd for the forward pass
  ConvDescs descs;
  Pd forward_pd, backward_data_pd, backward_weights_pd;
  Primitive forward, backward_data, backward_weights;
  std::once_flag backward_once;
};

using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, ConvolutionAlgorithm>;

std::shared_ptr<Plan> plan_for(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o,
                               ConvolutionAlgorithm algorithm) {
  static std::mutex mutex;
  static std::map<PlanKey, std::shared_ptr<Plan>> plans;
  const PlanKey key{n, c, h, w, o, algorithm};
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans.find(key);
  if (it != plans.end()) return it->second;
  const Onednn& dnnl = onednn();
  auto plan = std::make_shared<Plan>();
  const dnnl_alg_kind_t alg = algorithm == ConvolutionAlgorithm::kWinograd
                                  ? dnnl_convolution_winograd
                                  : dnnl_convolution_auto;
  plan->descs = conv_descs(dnnl.api, alg, n, c, h, w, o);
  plan->forward_pd = make_pd(dnnl, &plan->descs.forward, nullptr);
  plan->winograd =
      plan->forward_pd && impl_name(dnnl, plan->forward_pd.get()).find("wino") != std::string::npos;
  if (plan->winograd) plan->forward = make_primitive(dnnl, plan->forward_pd.get());
  plans.emplace(key, plan);
  return plan;
}

void make_backward(const Onednn& dnnl, Plan& plan) {
  std::call_once(plan.backward_once, [&] {
    plan.backward_data_pd = make_pd(dnnl, &plan.descs.backward_data, plan.forward_pd.get());
    plan.backward_weights_pd = make_pd(dnnl, &plan.descs.backward_weights, plan.forward_pd.get());
    if (!plan.backward_data_pd || !plan.backward_weights_pd)
      throw std::runtime_error("oneDNN has a Winograd forward convolution but no backward one");
    plan.backward_data = make_primitive(dnnl, plan.backward_data_pd.get());
    plan.backward_weights = make_primitive(dnnl, plan.backward_weights_pd.get());
  });
}

// oneDNN's CPU streams run the primitive on the calling thread (on its
// OpenMP threads); one per thread.
dnnl_stream_t thread_stream(const Onednn& dnnl) {
  struct Stream {
    const Api* api = nullptr;
    dnnl_stream_t stream = nullptr;
    ~Stream() {
      if (stream) api->stream_destroy(stream);
    }
  };
  thread_local Stream s;
  if (!s.stream) {
    check(dnnl.api.stream_create(&s.stream, dnnl.engine, dnnl_stream_default_flags),
          "stream_create");
    s.api = &dnnl.api;
  }
  return s.stream;
}

// A oneDNN memory over a tensor's bytes (the tensor keeps them alive).
class Memory {
 public:
  Memory(const Onednn& dnnl, const dnnl_memory_desc_t& md, void* data) : api_(&dnnl.api) {
    check(api_->memory_create(&memory_, &md, dnnl.engine, data), "memory_create");
  }
  ~Memory() { api_->memory_destroy(memory_); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  dnnl_memory_t get() const { return memory_; }

 private:
  const Api* api_;
  dnnl_memory_t memory_ = nullptr;
};

void reorder(const Onednn& dnnl, const dnnl_memory_desc_t& from_md, void* from,
             const dnnl_memory_desc_t& to_md, void* to) {
  RECORD_FUNCTION("garden::onednn_reorder", std::vector<c10::IValue>());
  dnnl_primitive_desc_t raw = nullptr;
  check(dnnl.api.reorder_pd_create(&raw, &from_md, dnnl.engine, &to_md, dnnl.engine, nullptr),
        "reorder_primitive_desc_create");
  Pd pd(raw, PdDeleter{&dnnl.api});
  // oneDNN's primitive cache keeps the compiled reorder between calls.
  Primitive p = make_primitive(dnnl, pd.get());
  Memory src(dnnl, from_md, from), dst(dnnl, to_md, to);
  const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, src.get()}, {DNNL_ARG_TO, dst.get()}};
  const dnnl_stream_t stream = thread_stream(dnnl);
  check(dnnl.api.primitive_execute(p.get(), stream, 2, args), "reorder");
  // Done before the memories above are destroyed, whatever the runtime.
  check(dnnl.api.stream_wait(stream), "stream_wait");
}

// `t`'s bytes in the layout `want`: `t` itself where its layout is that,
// else a reordered copy.
at::Tensor in_layout(const Onednn& dnnl, const at::Tensor& t, const dnnl_memory_desc_t& want) {
  const dnnl_memory_desc_t have = md_of(dnnl.api, t);
  if (dnnl.api.md_equal(&have, &want)) return t;
  at::Tensor copy =
      at::empty({static_cast<int64_t>(dnnl.api.md_get_size(&want))}, t.options().dtype(at::kByte));
  reorder(dnnl, have, t.data_ptr(), want, copy.data_ptr());
  return copy;
}

// Runs `primitive` writing its output `arg` (in layout `md`) into `out`,
// through a scratch buffer where out's layout differs.
template <typename Run>
void into(const Onednn& dnnl, at::Tensor& out, const dnnl_memory_desc_t& md, Run run) {
  const dnnl_memory_desc_t have = md_of(dnnl.api, out);
  if (dnnl.api.md_equal(&have, &md)) {
    run(out.data_ptr());
    return;
  }
  at::Tensor scratch =
      at::empty({static_cast<int64_t>(dnnl.api.md_get_size(&md))}, out.options().dtype(at::kByte));
  run(scratch.data_ptr());
  reorder(dnnl, md, scratch.data_ptr(), have, out.data_ptr());
}

void execute(const Onednn& dnnl, dnnl_primitive_t p, std::vector<dnnl_exec_arg_t> args) {
  RECORD_FUNCTION("garden::onednn_convolution", std::vector<c10::IValue>());
  const dnnl_stream_t stream = thread_stream(dnnl);
  check(dnnl.api.primitive_execute(p, stream, static_cast<int>(args.size()), args.data()),
        "convolution");
  check(dnnl.api.stream_wait(stream), "stream_wait");
}

const dnnl_memory_desc_t& query(const Onednn& dnnl, const Pd& pd, dnnl_query_t what) {
  return *dnnl.api.pd_query_md(pd.get(), what, 0);
}

at::Tensor dense(const at::Tensor& t) {
  return t.is_non_overlapping_and_dense() ? t : t.contiguous(t.suggest_memory_format());
}

// An input of a primitive: its argument, the layout the primitive takes,
// and its bytes in that layout.
struct Operand {
  int arg;
  const dnnl_memory_desc_t& md;
  at::Tensor data;
};

// Runs `primitive` on two inputs, its output `out_arg` (layout `out_md`)
// written into `out`.
void run_primitive(const Onednn& dnnl, dnnl_primitive_t primitive, const Operand& a,
                   const Operand& b, int out_arg, const dnnl_memory_desc_t& out_md,
                   at::Tensor& out) {
  into(dnnl, out, out_md, [&](void* dst) {
    Memory ma(dnnl, a.md, a.data.data_ptr()), mb(dnnl, b.md, b.data.data_ptr());
    Memory mo(dnnl, out_md, dst);
    execute(dnnl, primitive, {{a.arg, ma.get()}, {b.arg, mb.get()}, {out_arg, mo.get()}});
  });
}

// The forward pass's output, and its inputs in the layouts it took them in
// (the backward passes reuse them where they take the same).
struct Forward {
  at::Tensor y, x_in_layout, weight_in_layout;
};

Forward winograd_forward(const Plan& plan, const at::Tensor& x, const at::Tensor& weight) {
  const Onednn& dnnl = onednn();
  const Pd& pd = plan.forward_pd;
  const dnnl_memory_desc_t& src_md = query(dnnl, pd, dnnl_query_src_md);
  const dnnl_memory_desc_t& weights_md = query(dnnl, pd, dnnl_query_weights_md);
  Forward f;
  f.y = at::empty({x.size(0), weight.size(0), x.size(2), x.size(3)},
                  x.options().memory_format(x.suggest_memory_format()));
  f.x_in_layout = in_layout(dnnl, x, src_md);
  f.weight_in_layout = in_layout(dnnl, weight, weights_md);
  run_primitive(dnnl, plan.forward.get(), {DNNL_ARG_SRC, src_md, f.x_in_layout},
                {DNNL_ARG_WEIGHTS, weights_md, f.weight_in_layout}, DNNL_ARG_DST,
                query(dnnl, pd, dnnl_query_dst_md), f.y);
  return f;
}

// The tensor the forward pass kept under `key`, dropped from the context so
// that its memory goes as the backward pass moves on, as saved variables'
// does; undefined where there is none (a second backward pass through a
// retained graph).
at::Tensor take(torch::autograd::AutogradContext* ctx, const std::string& key) {
  auto it = ctx->saved_data.find(key);
  if (it == ctx->saved_data.end()) return at::Tensor();
  at::Tensor t = it->second.toTensor();
  ctx->saved_data.erase(it);
  return t;
}

// `t` in the layout `want`: `reordered` (t in the layout `have`) where it
// is defined and the two layouts are the same, else a reorder of t.
at::Tensor reuse_or_reorder(const Onednn& dnnl, const at::Tensor& t, const at::Tensor& reordered,
                            const dnnl_memory_desc_t& have, const dnnl_memory_desc_t& want) {
  return reordered.defined() && dnnl.api.md_equal(&have, &want) ? reordered
                                                                : in_layout(dnnl, t, want);
}

struct WinogradConv : public torch::autograd::Function<WinogradConv> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            const at::Tensor& weight, Plan* plan, bool keep_weight, bool keep_x) {
    RECORD_FUNCTION("garden::winograd_conv2d", std::vector<c10::IValue>());
    const at::Tensor input = dense(x), w = dense(weight);
    ctx->save_for_backward({input, w});
    // Plans live as long as the process (plan_for never drops one).
    ctx->saved_data["plan"] = reinterpret_cast<int64_t>(plan);
    Forward f = winograd_forward(*plan, input, w);
    // The reordered operands, kept for the backward passes: the weights
    // where x's gradient is wanted, the input where the weights' is (one
    // activation-sized copy per layer, saving a reorder of it).
    if (keep_weight) ctx->saved_data["weight_in_layout"] = f.weight_in_layout;
    if (keep_x) ctx->saved_data["x_in_layout"] = f.x_in_layout;
    return f.y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    RECORD_FUNCTION("garden::winograd_conv2d_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    Plan& plan = *reinterpret_cast<Plan*>(ctx->saved_data["plan"].toInt());
    const Onednn& dnnl = onednn();
    make_backward(dnnl, plan);
    const at::Tensor grad = dense(grads[0]);
    const auto forward_md = [&](dnnl_query_t what) -> const dnnl_memory_desc_t& {
      return query(dnnl, plan.forward_pd, what);
    };
    // The gradient in each backward primitive's layout, reordered once when
    // both take the same.
    const dnnl_memory_desc_t& data_dd_md =
        query(dnnl, plan.backward_data_pd, dnnl_query_diff_dst_md);
    const dnnl_memory_desc_t& weights_dd_md =
        query(dnnl, plan.backward_weights_pd, dnnl_query_diff_dst_md);
    at::Tensor data_dd, weights_dd;
    if (ctx->needs_input_grad(0)) data_dd = in_layout(dnnl, grad, data_dd_md);
    if (ctx->needs_input_grad(1))
      weights_dd = data_dd.defined() && dnnl.api.md_equal(&data_dd_md, &weights_dd_md)
                       ? data_dd
                       : in_layout(dnnl, grad, weights_dd_md);
    at::Tensor grad_x, grad_w;
    if (ctx->needs_input_grad(0)) {
      const Pd& pd = plan.backward_data_pd;
      const dnnl_memory_desc_t& w_md = query(dnnl, pd, dnnl_query_weights_md);
      grad_x = at::empty_like(x);
      run_primitive(dnnl, plan.backward_data.get(), {DNNL_ARG_DIFF_DST, data_dd_md, data_dd},
                    {DNNL_ARG_WEIGHTS, w_md,
                     reuse_or_reorder(dnnl, weight, take(ctx, "weight_in_layout"),
                                      forward_md(dnnl_query_weights_md), w_md)},
                    DNNL_ARG_DIFF_SRC, query(dnnl, pd, dnnl_query_diff_src_md), grad_x);
    }
    if (ctx->needs_input_grad(1)) {
      const Pd& pd = plan.backward_weights_pd;
      const dnnl_memory_desc_t& s_md = query(dnnl, pd, dnnl_query_src_md);
      grad_w = at::empty_like(weight);
      run_primitive(dnnl, plan.backward_weights.get(),
                    {DNNL_ARG_DIFF_DST, weights_dd_md, weights_dd},
                    {DNNL_ARG_SRC, s_md,
                     reuse_or_reorder(dnnl, x, take(ctx, "x_in_layout"),
                                      forward_md(dnnl_query_src_md), s_md)},
                    DNNL_ARG_DIFF_WEIGHTS, query(dnnl, pd, dnnl_query_diff_weights_md), grad_w);
    }
    // What this pass did not take (a gradient not asked for this time)
    // goes now, not with the graph.
    ctx->saved_data.erase("weight_in_layout");
    ctx->saved_data.erase("x_in_layout");
    return {grad_x, grad_w, at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

// The plan conv2d would run, or null where it goes to LibTorch.
std::shared_ptr<Plan> winograd_plan(const at::Tensor& x, const at::Tensor& weight, int64_t stride,
                                    int64_t padding, ConvolutionAlgorithm algorithm) {
  if (algorithm == ConvolutionAlgorithm::kDirect || !eligible(x, weight, stride, padding) ||
      !onednn().unavailable.empty())
    return nullptr;
  auto plan = plan_for(x.size(0), x.size(1), x.size(2), x.size(3), weight.size(0), algorithm);
  return plan->winograd ? plan : nullptr;
}

#else  // no oneDNN 2.x headers

struct Plan {};

std::shared_ptr<Plan> winograd_plan(const at::Tensor&, const at::Tensor&, int64_t, int64_t,
                                    ConvolutionAlgorithm) {
  return nullptr;
}

#endif

}  // namespace convolution_detail

void set_convolution_algorithm(ConvolutionAlgorithm algorithm) {
  convolution_detail::g_algorithm.store(algorithm, std::memory_order_relaxed);
}

ConvolutionAlgorithm convolution_algorithm() {
  return convolution_detail::g_algorithm.load(std::memory_order_relaxed);
}

ConvolutionAlgorithm parse_convolution_algorithm(const std::string& name) {
  if (name == "auto") return ConvolutionAlgorithm::kAuto;
  if (name == "direct") return ConvolutionAlgorithm::kDirect;
  if (name == "winograd") return ConvolutionAlgorithm::kWinograd;
  throw std::invalid_argument("'" + name + "' is not one of auto, direct, winograd");
}

const std::string& winograd_unavailable_reason() {
#ifdef GARDEN_HAVE_WINOGRAD
  return convolution_detail::onednn().unavailable;
#else
  static const std::string reason =
      "Garden was built without oneDNN 2.x's headers (Debian's libdnnl-dev)";
  return reason;
#endif
}

bool conv2d_uses_winograd(const at::Tensor& x, const at::Tensor& weight, int64_t stride,
                          int64_t padding, ConvolutionAlgorithm algorithm) {
  return convolution_detail::winograd_plan(x, weight, stride, padding, algorithm) != nullptr;
}

at::Tensor conv2d(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                  int64_t stride, int64_t padding) {
#ifdef GARDEN_HAVE_WINOGRAD
  if (auto plan =
          convolution_detail::winograd_plan(x, weight, stride, padding, convolution_algorithm())) {
    const bool grad = at::GradMode::is_enabled();
    at::Tensor y = convolution_detail::WinogradConv::apply(
        x, weight, plan.get(), grad && x.requires_grad(), grad && weight.requires_grad());
    return bias.defined() ? y + bias.view({1, -1, 1, 1}) : y;
  }
#endif
  return at::conv2d(x, weight, bias, {stride, stride}, {padding, padding});
}

}  // namespace garden::kernels
