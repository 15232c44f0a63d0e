// inventory.cpp: tallies over ModelWeights.
#include "model/inventory.h"

namespace dsv4 {

namespace {

class Counter {
 public:
  explicit Counter(Inventory& inv) : inv_(inv) {}

  void linear(const std::string& role, const LinearWeight& w) {
    if (!w.valid()) return;
    add(inv_.by_format[weight_format_name(w.format)], w.n_bytes());
    add(inv_.by_role[role], w.n_bytes());
  }

  void layer(const LayerWeights& L, const std::string& tag) {
    const AttentionWeights& A = L.attn;
    for (const LinearWeight* w : {&A.wq_a, &A.wq_b, &A.wkv, &A.wo_a, &A.wo_b}) linear(tag + " attention", *w);
    if (A.has_compressor) {
      linear(tag + " compressor", A.compressor.wkv);
      linear(tag + " compressor", A.compressor.wgate);
    }
    if (A.has_indexer)
      for (const LinearWeight* w :
           {&A.indexer.wq_b, &A.indexer.weights_proj, &A.indexer.compressor.wkv, &A.indexer.compressor.wgate})
        linear(tag + " indexer", *w);
    linear(tag + " router", L.moe.gate);
    for (const ExpertWeights& e : L.moe.experts)
      for (const LinearWeight* w : {&e.w1, &e.w3, &e.w2}) linear(tag + " routed experts", *w);
    if (L.moe.has_shared)
      for (const LinearWeight* w : {&L.moe.shared.w1, &L.moe.shared.w3, &L.moe.shared.w2})
        linear(tag + " shared expert", *w);
  }

 private:
  static void add(Tally& t, size_t bytes) {
    t.count += 1;
    t.bytes += bytes;
  }
  Inventory& inv_;
};

}  // namespace

Inventory take_inventory(const ModelWeights& w) {
  Inventory inv;
  for (const auto& [name, t] : w.store->tensors()) {
    Tally& d = inv.by_dtype[dtype_name(t.dtype)];
    d.count += 1;
    d.bytes += t.n_bytes;
    inv.total_bytes += t.n_bytes;
  }
  Counter c(inv);
  for (const LayerWeights& L : w.layers) c.layer(L, attn_type_name(L.spec.attn));
  if (w.has_mtp) {
    c.layer(w.mtp.layer, "mtp");
    c.linear("mtp projections", w.mtp.e_proj);
    c.linear("mtp projections", w.mtp.h_proj);
  }
  c.linear("head", w.head);
  return inv;
}

}  // namespace dsv4
