#include "common/store/variable.h"

#include <cmath>
#include <cstring>

#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

VariableDef Def(const std::string& text) {
  VariableDef d;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &d)) << text;
  return d;
}

std::unique_ptr<Optimizer> Sgd(float lr = 1.0f) {
  OptimizerDef d;
  d.mutable_sgd()->set_learning_rate(lr);
  return *Optimizer::Create(d);
}

TEST(VariableTest, DenseApplyAndBadGradientsChangeNothing) {
  auto opt = Sgd(0.5f);
  auto v = Variable::Create(Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 2 dim: 2 }
                                   initializer { kind: CONSTANT value: 1 })"), opt.get());
  ASSERT_TRUE(v.ok()) << v.status();
  ASSERT_TRUE((*v)->ApplyDense(Tensor::FromVector<float>({1, 2, 3, 4}, TensorShape({2, 2}))).ok());
  Tensor now = *(*v)->Read();
  EXPECT_EQ(std::vector<float>(now.data<float>(), now.data<float>() + 4),
            (std::vector<float>{0.5f, 0.0f, -0.5f, -1.0f}));
  absl::Status s = (*v)->ApplyDense(Tensor::Zeros(DT_FLOAT, TensorShape({4})));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("variable w: gradient is float32[4], the variable is float32[2,2]"));
  s = (*v)->ApplyDense(Tensor::Zeros(DT_INT64, TensorShape({2, 2})));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  Tensor after = *(*v)->Read();
  EXPECT_EQ(after.data<float>()[3], -1.0f);
}

TEST(VariableTest, RowSliceOfAPartitionedVariableMatchesTheWhole) {
  auto opt = Sgd();
  auto whole = Variable::Create(Def(R"(name: "big" dtype: DT_FLOAT shape { dim: 10 dim: 3 } seed: 4)"), opt.get());
  auto slice = Variable::Create(Def(R"(name: "big" dtype: DT_FLOAT shape { dim: 10 dim: 3 } seed: 4
                                       row_begin: 6 row_end: 10)"), opt.get());
  ASSERT_TRUE(whole.ok() && slice.ok());
  Tensor w = *(*whole)->Read(), s = *(*slice)->Read();
  EXPECT_EQ(s.shape(), TensorShape({4, 3}));
  for (int i = 0; i < 12; ++i) EXPECT_EQ(s.data<float>()[i], w.data<float>()[18 + i]);
  EXPECT_THAT(std::string(Variable::Create(Def(R"(name: "big" dtype: DT_FLOAT shape { dim: 10 dim: 3 }
                                       row_begin: 6 row_end: 11)"), opt.get()).status().message()),
              HasSubstr("row slice [6, 11) does not fit shape [10,3]"));
}

TEST(VariableTest, FixedTableRowsAndRangeChecks) {
  auto opt = Sgd();
  auto v = Variable::Create(Def(R"(name: "emb" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 100 dim: 2 }
                                   row_begin: 50 row_end: 100 initializer { kind: ZEROS })"), opt.get());
  ASSERT_TRUE(v.ok()) << v.status();
  Tensor ids = Tensor::FromVector<int64_t>({60, 60, 99}, TensorShape({3}));
  Tensor g = Tensor::FromVector<float>({1, 1, 2, 2, 3, 3}, TensorShape({3, 2}));
  ASSERT_TRUE((*v)->ApplyRows(ids, g).ok());
  Tensor rows = *(*v)->ReadRows(Tensor::FromVector<int64_t>({99, 60, 50}, TensorShape({3})));
  EXPECT_EQ(std::vector<float>(rows.data<float>(), rows.data<float>() + 6),
            (std::vector<float>{-3, -3, -3, -3, 0, 0}));  // id 60 got 1+2 in one update
  auto bad = (*v)->ReadRows(Tensor::FromVector<int64_t>({49}, TensorShape({1})));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("id 49 is out of range [50, 100)"));
  EXPECT_EQ((*v)->ApplyRows(ids, Tensor::Zeros(DT_FLOAT, TensorShape({3, 3}))).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(VariableTest, HashTableMakesRowsOnFirstTouchDeterministically) {
  auto opt = Sgd();
  std::string def = R"(name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 4 } seed: 3
                       initializer { kind: UNIFORM minval: -1 maxval: 1 })";
  auto a = Variable::Create(Def(def), opt.get());
  auto b = Variable::Create(Def(def), opt.get());
  ASSERT_TRUE(a.ok()) << a.status();
  std::vector<int64_t> many;
  for (int64_t i = 0; i < 3000; ++i) many.push_back(i * 1000003);  // forces growth
  Tensor ra = *(*a)->ReadRows(Tensor::FromVector<int64_t>(many, TensorShape({3000})));
  Tensor rb = *(*b)->ReadRows(Tensor::FromVector<int64_t>({many[2999]}, TensorShape({1})));
  for (int k = 0; k < 4; ++k) EXPECT_EQ(ra.data<float>()[2999 * 4 + k], rb.data<float>()[k]);
  EXPECT_EQ((*a)->rows(), 3000);
  EXPECT_EQ((*a)->Read().status().code(), absl::StatusCode::kInvalidArgument);
}

// Read-only rows (the chief's evaluation): a known id's row as it is, an
// unknown one's initial value, and no row made.
TEST(VariableTest, ReadOnlyRowsMakeNothing) {
  auto opt = Sgd();
  std::string def = R"(name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 } seed: 3
                       initializer { kind: UNIFORM minval: -1 maxval: 1 })";
  auto v = Variable::Create(Def(def), opt.get());
  ASSERT_TRUE(v.ok()) << v.status();
  Tensor seven = Tensor::FromVector<int64_t>({7}, TensorShape({1}));
  ASSERT_TRUE((*v)->ApplyRows(seven, Tensor::FromVector<float>({1, 1}, TensorShape({1, 2}))).ok());
  Tensor trained = *(*v)->ReadRows(seven);
  auto ro = (*v)->ReadRows(Tensor::FromVector<int64_t>({7, 9}, TensorShape({2})), nullptr, /*make_rows=*/false);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ((*v)->rows(), 1);  // 9 was not made
  EXPECT_EQ(ro->data<float>()[0], trained.data<float>()[0]);
  EXPECT_EQ(ro->data<float>()[1], trained.data<float>()[1]);
  Tensor made = *(*v)->ReadRows(Tensor::FromVector<int64_t>({9}, TensorShape({1})));
  EXPECT_EQ((*v)->rows(), 2);
  EXPECT_EQ(ro->data<float>()[2], made.data<float>()[0]);  // the value it would get
  EXPECT_EQ(ro->data<float>()[3], made.data<float>()[1]);
}

// An Adam hash table with rows 5 and 7 updated once.
struct AdamTable {
  AdamTable() {
    OptimizerDef d;
    d.mutable_adam()->set_learning_rate(0.1f);
    opt = *Optimizer::Create(d);
    v = *Variable::Create(Def(R"(name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 })"),
                          opt.get());
    EXPECT_TRUE(v->ApplyRows(ids, Tensor::FromVector<float>({1, 1, 1, 1}, TensorShape({2, 2}))).ok());
  }
  std::unique_ptr<Optimizer> opt;
  std::unique_ptr<Variable> v;
  Tensor ids = Tensor::FromVector<int64_t>({5, 7}, TensorShape({2}));
};

// The capacity past the rows made is left unwritten (so it costs no
// memory): every row a growth or a restore makes room for must still get
// the slots' initial value (Adagrad's 0.1) when it is made, here across
// three growths and after a restore onto fresh storage.
TEST(VariableTest, HashRowsMadeAfterGrowthsAndARestoreStartFromTheSlotsInitialValue) {
  OptimizerDef d;
  d.mutable_adagrad()->set_learning_rate(0.1f);
  d.mutable_adagrad()->set_initial_accumulator(0.25f);
  std::unique_ptr<Optimizer> opt = *Optimizer::Create(d);
  auto made = Variable::Create(Def(R"(name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 3 }
                                      initializer { kind: CONSTANT value: 2 })"), opt.get());
  ASSERT_TRUE(made.ok()) << made.status();
  Variable* v = made->get();
  auto touch = [&](int64_t first, int64_t n) {
    std::vector<int64_t> ids(n);
    for (int64_t i = 0; i < n; ++i) ids[i] = (first + i) * 7919;
    ASSERT_TRUE(v->ReadRows(Tensor::FromVector<int64_t>(ids, TensorShape({n}))).ok());
  };
  auto expect_initial = [&](int64_t rows) {
    VariableState st = v->CopyState();
    ASSERT_EQ(st.ids.NumElements(), rows);
    ASSERT_EQ(st.slots.size(), 1u);
    for (int64_t i = 0; i < rows * 3; ++i) {
      ASSERT_EQ(st.value.data<float>()[i], 2.0f) << "value element " << i;
      ASSERT_EQ(st.slots[0].data<float>()[i], 0.25f) << "slot element " << i;
    }
  };
  touch(0, 5000);  // 1024 -> 2048 -> 4096 -> 8192 rows of capacity
  expect_initial(5000);
  ASSERT_TRUE(v->LoadState(v->CopyState()).ok());  // fresh storage of twice the rows
  touch(5000, 3000);
  expect_initial(8000);
}

TEST(VariableTest, StateRoundTripsWithSlots) {
  AdamTable t;
  Variable* v = t.v.get();
  const Tensor& ids = t.ids;
  VariableState st = v->CopyState();
  EXPECT_EQ(st.ids.NumElements(), 2);
  EXPECT_EQ(st.slots.size(), 2u);
  Tensor before = *v->ReadRows(ids);
  ASSERT_TRUE(v->ApplyRows(ids, Tensor::FromVector<float>({1, 1, 1, 1}, TensorShape({2, 2}))).ok());
  ASSERT_TRUE(v->LoadState(st).ok());
  Tensor after = *v->ReadRows(ids);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after.data<float>()[i], before.data<float>()[i]);
  EXPECT_EQ(v->CopyState().updates, 1);
}

TEST(VariableTest, InconsistentStateIsRefusedBeforeAnythingChanges) {
  AdamTable t;
  Variable* v = t.v.get();
  const Tensor& ids = t.ids;
  VariableState st = v->CopyState();
  Tensor before = *v->ReadRows(ids);
  // A slot longer than its rows (would overrun the table on load).
  VariableState bad_slot = st;
  bad_slot.slots[1] = Tensor::Zeros(DT_FLOAT, TensorShape({4000, 2}));
  absl::Status s = v->CheckState(bad_slot);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("snapshot slot is float32[4000,2], expected float32[2,2]"));
  EXPECT_EQ(v->LoadState(bad_slot).code(), absl::StatusCode::kInvalidArgument);
  VariableState bad_ids = st;
  bad_ids.ids = Tensor::FromVector<int64_t>({5}, TensorShape({1}));
  EXPECT_EQ(v->LoadState(bad_ids).code(), absl::StatusCode::kInvalidArgument);
  Tensor after = *v->ReadRows(ids);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(after.data<float>()[i], before.data<float>()[i]);
  EXPECT_TRUE(v->CheckState(st).ok());
}

// A checkpoint's delta copies only the rows touched since the previous
// snapshot copy, with their ids (a fixed table's: row numbers), and starts
// the touched set anew; a restore clears it.
TEST(VariableTest, SnapshotDeltasHoldOnlyTouchedRows) {
  auto opt = Sgd(1.0f);
  auto ids = [](std::vector<int64_t> v) {
    const int64_t n = static_cast<int64_t>(v.size());
    return Tensor::FromVector<int64_t>(v, TensorShape({n}));
  };
  auto grads = [](int64_t n) { return Tensor::Zeros(DT_FLOAT, TensorShape({n, 2})); };
  auto got = [](const VariableState& st) {
    return std::vector<int64_t>(st.ids.data<int64_t>(), st.ids.data<int64_t>() + st.ids.NumElements());
  };
  auto fixed = Variable::Create(Def(R"(name: "f" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 10 dim: 2 }
                                       row_begin: 4 row_end: 10 initializer { kind: ONES })"), opt.get());
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  ASSERT_TRUE((*fixed)->ApplyRows(ids({9, 5, 9}), grads(3)).ok());
  VariableState d = (*fixed)->CopyForSnapshot(nullptr, /*delta=*/true);
  EXPECT_TRUE(d.delta);
  EXPECT_EQ(got(d), (std::vector<int64_t>{5, 9}));
  EXPECT_EQ(d.value.shape(), TensorShape({2, 2}));
  EXPECT_EQ(got((*fixed)->CopyForSnapshot(nullptr, true)), std::vector<int64_t>{});  // nothing since
  ASSERT_TRUE((*fixed)->ApplyRows(ids({6}), grads(1)).ok());
  VariableState whole = (*fixed)->CopyForSnapshot(nullptr, /*delta=*/false);
  EXPECT_FALSE(whole.delta);
  EXPECT_EQ(whole.value.shape(), TensorShape({6, 2}));
  EXPECT_EQ(got((*fixed)->CopyForSnapshot(nullptr, true)), std::vector<int64_t>{});  // a full copy is a base too

  auto hash = Variable::Create(Def(R"(name: "h" kind: HASH_TABLE dtype: DT_FLOAT shape { dim: 0 dim: 2 }
                                      initializer { kind: ONES })"), opt.get());
  ASSERT_TRUE(hash.ok());
  ASSERT_TRUE((*hash)->ApplyRows(ids({70, -3}), grads(2)).ok());
  ASSERT_TRUE((*hash)->CopyForSnapshot(nullptr, true).delta);
  ASSERT_TRUE((*hash)->ReadRows(ids({70, 8})).ok());  // 8 is made by the pull: a new row to save
  ASSERT_TRUE((*hash)->ApplyRows(ids({-3}), grads(1)).ok());
  EXPECT_EQ(got((*hash)->CopyForSnapshot(nullptr, true)), (std::vector<int64_t>{-3, 8}));  // by row
  ASSERT_TRUE((*hash)->ApplyRows(ids({70}), grads(1)).ok());
  ASSERT_TRUE((*hash)->LoadState((*hash)->CopyState()).ok());
  EXPECT_EQ(got((*hash)->CopyForSnapshot(nullptr, true)), std::vector<int64_t>{});
}

TEST(VariableTest, RefusesBadDefinitions) {
  auto opt = Sgd();
  EXPECT_THAT(std::string(Variable::Create(Def(R"(name: "x" dtype: DT_INT64 shape { dim: 2 })"), opt.get()).status().message()),
              HasSubstr("only float32"));
  EXPECT_THAT(std::string(Variable::Create(Def(R"(name: "t" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 2 })"), opt.get()).status().message()),
              HasSubstr("[rows, dim]"));
  auto v = *Variable::Create(Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 2 })"), opt.get());
  EXPECT_THAT(std::string(v->SameAs(Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 3 })")).message()),
              HasSubstr("exists as DENSE [2]"));
}

}  // namespace
}  // namespace psrt

namespace psrt {
namespace {

// What a pool changes: nothing but the threads. Each optimizer's update of
// a large variable (and of many table rows) split over a pool's threads is
// bit-identical to one pass on the caller, and a value read before the
// update keeps its bytes (copy-on-write).
TEST(VariableTest, PooledApplyIsBitIdenticalToOnePass) {
  std::unique_ptr<WorkPool> pool = WorkPool::Create(4);
  for (const char* text : {"sgd { learning_rate: 0.1 }", "momentum { learning_rate: 0.1 momentum: 0.9 }",
                           "momentum { learning_rate: 0.1 momentum: 0.9 nesterov: true }",
                           "adagrad { learning_rate: 0.1 }", "adam { learning_rate: 0.01 }",
                           "ftrl { learning_rate: 0.1 l1: 0.001 l2: 0.01 }",
                           "ftrl { learning_rate: 0.1 l1: 0.001 learning_rate_power: -0.7 }",
                           "adamw { learning_rate: 0.01 }",
                           "rmsprop { learning_rate: 0.01 momentum: 0.9 centered: true }"}) {
    OptimizerDef od;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &od)) << text;
    std::unique_ptr<Optimizer> opt = *Optimizer::Create(od);
    // 1,100,001 elements: four parts of a 4-thread pool, and a tail that
    // is not a whole vector; 16,000 rows of 64: four parts.
    const VariableDef dense = Def(R"(name: "w" dtype: DT_FLOAT shape { dim: 1100001 } seed: 3)");
    const VariableDef table = Def(R"(name: "e" kind: FIXED_TABLE dtype: DT_FLOAT shape { dim: 20000 dim: 64 } seed: 5)");
    auto serial = Variable::Create(dense, opt.get());
    auto pooled = Variable::Create(dense, opt.get());
    auto serial_t = Variable::Create(table, opt.get());
    auto pooled_t = Variable::Create(table, opt.get());
    ASSERT_TRUE(serial.ok() && pooled.ok() && serial_t.ok() && pooled_t.ok());
    Tensor grad(DT_FLOAT, TensorShape({1100001}));
    for (int64_t i = 0; i < grad.NumElements(); ++i) grad.data<float>()[i] = std::sin(0.001f * i);
    Tensor ids(DT_INT64, TensorShape({16000}));
    for (int64_t i = 0; i < 16000; ++i) ids.data<int64_t>()[i] = (i * 7) % 20000;
    Tensor rows(DT_FLOAT, TensorShape({16000, 64}));
    for (int64_t i = 0; i < rows.NumElements(); ++i) rows.data<float>()[i] = std::cos(0.01f * i);
    const Tensor before = *(*pooled)->Read();
    const Tensor before_copy = before.Copy();
    for (int step = 0; step < 3; ++step) {
      ASSERT_TRUE((*serial)->ApplyDense(grad).ok());
      ASSERT_TRUE((*pooled)->ApplyDense(grad, pool.get()).ok());
      ASSERT_TRUE((*serial_t)->ApplyRows(ids, rows).ok());
      ASSERT_TRUE((*pooled_t)->ApplyRows(ids, rows, pool.get()).ok());
    }
    const Tensor a = *(*serial)->Read(), b = *(*pooled)->Read();
    EXPECT_EQ(std::memcmp(a.raw_data(), b.raw_data(), a.TotalBytes()), 0) << text;
    EXPECT_NE(std::memcmp(a.raw_data(), before_copy.raw_data(), a.TotalBytes()), 0) << text << ": nothing applied";
    EXPECT_EQ(std::memcmp(before.raw_data(), before_copy.raw_data(), before.TotalBytes()), 0)
        << text << ": a value read before the update changed";
    const VariableState sa = (*serial)->CopyState(), sb = (*pooled)->CopyState();
    for (size_t k = 0; k < sa.slots.size(); ++k) {
      EXPECT_EQ(std::memcmp(sa.slots[k].raw_data(), sb.slots[k].raw_data(), sa.slots[k].TotalBytes()), 0)
          << text << ": slot " << k;
    }
    const Tensor ta = *(*serial_t)->Read(), tb = *(*pooled_t)->Read();
    EXPECT_EQ(std::memcmp(ta.raw_data(), tb.raw_data(), ta.TotalBytes()), 0) << text << ": table";
  }
}

}  // namespace
}  // namespace psrt
