// Sliding-window geometry for Conv2D and the pooling ops: padding and output sizes.
//
// This is the single place that turns (input size, window, strides, dilations, padding mode)
// into pads and output sizes; shape functions, reference kernels and oneDNN kernels all call
// it, so they cannot disagree. Padding modes:
//   VALID    no padding; out = floor((in - eff_k) / stride) + 1, eff_k = (k - 1) * dilation + 1
//   SAME     TensorFlow's rule: out = ceil(in / stride), total padding
//            max((out - 1) * stride + eff_k - in, 0), the odd unit at the bottom/right
//   EXPLICIT pads [top, bottom, left, right]; out = floor((in + pads - eff_k) / stride) + 1
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/limits.h"
#include "core/shape.h"
#include "graph/attr.h"

namespace sf {

// The window attributes shared by Conv2D, its backprops and the pooling ops.
struct WindowAttrs {
  std::vector<int64_t> window;     // [kh, kw] (pooling only; conv takes it from the filter)
  std::vector<int64_t> strides;    // [sh, sw]
  std::vector<int64_t> dilations;  // [dh, dw]
  std::string padding;             // "SAME", "VALID" or "EXPLICIT"
  std::vector<int64_t> pads;       // [top, bottom, left, right]
};

// The geometry along one spatial axis.
struct Window1D {
  int64_t in = 0, k = 1, stride = 1, dilation = 1;
  int64_t pad_before = 0, pad_after = 0;
  int64_t out = 0;
  int64_t effective_k() const { return (k - 1) * dilation + 1; }
  // The input's extent with zeros around it wherever a tap may fall: kernels that copy the
  // input into such borders never test a tap's bounds.
  int64_t padded_extent() const {
    return std::max(in + pad_before, (out - 1) * stride + effective_k());
  }
};

struct Window2D {
  Window1D h, w;
};

// Reads the window attributes of a node; `window_attr` names the ksize attribute (empty for
// Conv2D, whose window comes from the filter). Attribute values are validated by window_2d.
inline WindowAttrs window_attrs(const Attrs& attrs, const std::string& window_attr = "") {
  WindowAttrs a;
  if (!window_attr.empty()) a.window = attrs.get_ints(window_attr);
  a.strides = attrs.get_ints("strides");
  a.dilations = attrs.has("dilations") ? attrs.get_ints("dilations") : std::vector<int64_t>{1, 1};
  a.padding = attrs.get_string("padding");
  a.pads = attrs.get_ints("pads");
  return a;
}

namespace detail {

inline std::string window_1d(int64_t in, int64_t k, int64_t stride, int64_t dilation,
                             const std::string& padding, int64_t pad_before, int64_t pad_after,
                             const char* axis, Window1D* out) {
  Window1D g{in, k, stride, dilation, 0, 0, 0};
  // Overflow-safe bounds first: a hostile dilation or window must not wrap the arithmetic below.
  if (k - 1 > limits::kMaxWindowExtent / dilation)
    return fmt::format("{} window {} with dilation {} spans more than {}", axis, k, dilation,
                       limits::kMaxWindowExtent);
  if (in > limits::kMaxElements)
    return fmt::format("{} input {} is larger than {}", axis, in, limits::kMaxElements);
  const int64_t eff = g.effective_k();
  if (padding == "SAME") {
    g.out = in == 0 ? 0 : (in - 1) / stride + 1;
    const int64_t total = std::max<int64_t>((g.out - 1) * stride + eff - in, 0);
    g.pad_before = total / 2;
    g.pad_after = total - g.pad_before;
  } else {
    if (padding == "EXPLICIT") {
      if (pad_before > limits::kMaxWindowPadding || pad_after > limits::kMaxWindowPadding)
        return fmt::format("{} pads [{},{}] exceed {}", axis, pad_before, pad_after,
                           limits::kMaxWindowPadding);
      g.pad_before = pad_before;
      g.pad_after = pad_after;
    }
    const int64_t span = in + g.pad_before + g.pad_after;
    if (span < eff)
      return fmt::format("window {} (dilated {}) is larger than the {} input {}{}", k, eff, axis,
                         in, g.pad_before + g.pad_after ? " plus padding" : "");
    g.out = (span - eff) / stride + 1;
  }
  // Padding is what oneDNN materializes and loops over; a huge pad (SAME with a huge dilated
  // window) hangs its primitive creation or exhausts memory, so bound it here.
  if (g.pad_before > limits::kMaxWindowPadding || g.pad_after > limits::kMaxWindowPadding)
    return fmt::format("{} padding [{},{}] (window {}, dilation {}, stride {}, input {}) exceeds {}",
                       axis, g.pad_before, g.pad_after, k, dilation, stride, in,
                       limits::kMaxWindowPadding);
  *out = g;
  return "";
}

}  // namespace detail

// Computes the geometry for an input of spatial size in_h x in_w and a kh x kw window.
// Returns an error message (empty on success) so that shape functions can prefix the node.
inline std::string window_2d(int64_t in_h, int64_t in_w, int64_t kh, int64_t kw,
                             const WindowAttrs& a, Window2D* out) {
  auto pair_ok = [](const std::vector<int64_t>& v) {
    return v.size() == 2 && v[0] >= 1 && v[1] >= 1;
  };
  if (!pair_ok(a.strides))
    return fmt::format("strides must be 2 positive ints, got [{}]", fmt::join(a.strides, ","));
  if (!pair_ok(a.dilations))
    return fmt::format("dilations must be 2 positive ints, got [{}]", fmt::join(a.dilations, ","));
  if (kh < 1 || kw < 1) return fmt::format("window [{},{}] must be positive", kh, kw);
  if (a.padding != "SAME" && a.padding != "VALID" && a.padding != "EXPLICIT")
    return fmt::format("padding must be SAME, VALID or EXPLICIT, got '{}'", a.padding);
  if (a.pads.size() != 4 || a.pads[0] < 0 || a.pads[1] < 0 || a.pads[2] < 0 || a.pads[3] < 0)
    return fmt::format("pads must be 4 non-negative ints [top,bottom,left,right], got [{}]",
                       fmt::join(a.pads, ","));
  if (a.padding != "EXPLICIT" && (a.pads[0] || a.pads[1] || a.pads[2] || a.pads[3]))
    return fmt::format("pads [{}] need padding EXPLICIT, got {}", fmt::join(a.pads, ","),
                       a.padding);
  std::string err = detail::window_1d(in_h, kh, a.strides[0], a.dilations[0], a.padding, a.pads[0],
                                      a.pads[1], "height", &out->h);
  if (err.empty())
    err = detail::window_1d(in_w, kw, a.strides[1], a.dilations[1], a.padding, a.pads[2], a.pads[3],
                            "width", &out->w);
  return err;
}

// For kernels: the node passed its shape function, so a failure here is an internal error.
inline Window2D window_2d_checked(int64_t in_h, int64_t in_w, int64_t kh, int64_t kw,
                                  const WindowAttrs& a) {
  Window2D g;
  std::string err = window_2d(in_h, in_w, kh, kw, a, &g);
  SF_CHECK(err.empty(), "window geometry: {}", err);
  return g;
}

// Conv2D geometry from x [N,H,W,C] and filter [kh,kw,C/groups,O].
inline Window2D conv_window(const Attrs& attrs, const Shape& x, const Shape& filter) {
  return window_2d_checked(x[1], x[2], filter[0], filter[1], window_attrs(attrs));
}

// Pooling geometry from x [N,H,W,C] and the ksize attribute.
inline Window2D pool_window(const Attrs& attrs, const Shape& x) {
  WindowAttrs a = window_attrs(attrs, "ksize");
  SF_CHECK(a.window.size() == 2, "ksize must have 2 entries");
  return window_2d_checked(x[1], x[2], a.window[0], a.window[1], a);
}

// Every window must overlap the input, so no pooled output is made of padding alone. An empty
// string, or what is wrong.
inline std::string pool_pads_inside_windows(const Window2D& g) {
  if (g.h.pad_before < g.h.k && g.h.pad_after < g.h.k && g.w.pad_before < g.w.k &&
      g.w.pad_after < g.w.k)
    return "";
  return fmt::format("pads [{},{},{},{}] must be smaller than ksize [{},{}]", g.h.pad_before,
                     g.h.pad_after, g.w.pad_before, g.w.pad_after, g.h.k, g.w.k);
}

// An op that pools its own output (FusedConv2DMaxPool and its gradient) carries its pool's
// window attributes beside the conv's, each named with the prefix "pool_": pool_ksize,
// pool_strides, pool_padding, pool_pads.
inline constexpr const char* kPoolWindowAttrNames[] = {"ksize", "strides", "padding", "pads"};
inline std::string prefixed_pool_attr(const char* name) { return std::string("pool_") + name; }

// The pool's own attributes (ksize, strides, padding, pads) from such an op's.
inline Attrs unprefixed_pool_attrs(const Attrs& attrs) {
  Attrs pool;
  for (const char* name : kPoolWindowAttrNames)
    pool.set(name, attrs.all().at(prefixed_pool_attr(name)));
  return pool;
}

// The pooling geometry of such an op. An empty string, or what is wrong.
inline std::string prefixed_pool_window(const Attrs& attrs, const Shape& x, Window2D* out) {
  const WindowAttrs a = window_attrs(unprefixed_pool_attrs(attrs), "ksize");
  if (a.window.size() != 2) return "pool_ksize must have 2 entries";
  const std::string err = window_2d(x[1], x[2], a.window[0], a.window[1], a, out);
  return err.empty() ? pool_pads_inside_windows(*out) : err;
}

// Whether the windows along an axis cover every input position exactly once (stride k, the
// last window reaching the end), as training's 2x2 pools do.
inline bool windows_tile(const Window1D& a) {
  return a.stride == a.k && (a.out - 1) * a.stride - a.pad_before + a.k >= a.in;
}

// Where MaxPoolWindowArgmax records a window's first maximum: its row-major position in the
// whole kh x kw window (positions in padding counted), or this value where the window routes no
// gradient (it holds no value, or with relu its maximum is not positive).
inline constexpr int64_t kNoWindowArgmax = 255;

}  // namespace sf
