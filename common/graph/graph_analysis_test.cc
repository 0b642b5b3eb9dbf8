#include "common/graph/graph_analysis.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

GraphDef Mlp() {
  GraphDef g;
  GraphBuilder b(&g);
  b.Add("Placeholder", "x", {}, {{"shape", AttrShape({-1, 4})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Placeholder", "label", {}, {{"shape", AttrShape({-1})}, {"dtype", AttrType(DT_INT64)}});
  b.Add("Variable", "w", {}, {{"shape", AttrShape({4, 3})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("Variable", "unused", {}, {{"shape", AttrShape({2})}, {"dtype", AttrType(DT_FLOAT)}});
  b.Add("MatMul", "logits", {"x", "w"});
  b.Add("SoftmaxCrossEntropy", "loss", {"logits", "label"});
  b.Add("Accuracy", "accuracy", {"logits", "label"});
  return g;
}

std::string Error(const GraphDef& g) { return std::string(ValidateGraph(g).status().message()); }

TEST(GraphAnalysisTest, InfersShapesWithAnUnknownBatch) {
  auto shapes = ValidateGraph(Mlp());
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  EXPECT_EQ(ShapeString((*shapes)["logits"][0]), "[?,3]");
  EXPECT_EQ((*shapes)["loss"][0].size(), 0u);
}

TEST(GraphAnalysisTest, RefusesBadGraphsNamingTheNode) {
  GraphDef g = Mlp();
  g.mutable_node(4)->set_op("MatMull");
  EXPECT_THAT(Error(g), HasSubstr("node logits (MatMull): unknown op"));

  g = Mlp();
  g.mutable_node(4)->set_input(1, "ww");
  EXPECT_THAT(Error(g), HasSubstr("node logits (MatMul): input \"ww\" names no node"));

  g = Mlp();
  (*g.mutable_node(2)->mutable_attr())["shape"] = AttrShape({5, 3});
  EXPECT_THAT(Error(g), HasSubstr("node logits (MatMul): inner dimensions differ: [?,4] x [5,3]"));

  g = Mlp();
  g.mutable_node(0)->set_op("Identity");
  g.mutable_node(0)->add_input("logits");
  EXPECT_THAT(Error(g), HasSubstr("cycle through: x, logits, loss, accuracy"));

  g = Mlp();
  g.mutable_node(4)->add_input("x");
  EXPECT_THAT(Error(g), HasSubstr("takes 2 inputs, has 3"));

  g = Mlp();
  g.mutable_node(5)->set_name("logits");
  EXPECT_THAT(Error(g), HasSubstr("duplicate node name"));

  g = Mlp();
  g.mutable_node(5)->set_input(0, "logits:3");
  EXPECT_THAT(Error(g), HasSubstr("logits has 1 outputs"));
}

TEST(GraphAnalysisTest, PruneKeepsWhatFetchesNeed) {
  auto p = Prune(Mlp(), {"loss"});
  ASSERT_TRUE(p.ok());
  std::vector<std::string> names;
  for (const auto& n : p->node()) names.push_back(n.name());
  EXPECT_EQ(names, (std::vector<std::string>{"x", "label", "w", "logits", "loss"}));
  EXPECT_FALSE(Prune(Mlp(), {"nothing"}).ok());
}

TEST(GraphAnalysisTest, GradientsOnlyForVariablesTheLossReads) {
  GraphDef g = Mlp();
  auto grads = AddGradients(&g, "loss", {"w"});
  ASSERT_TRUE(grads.ok()) << grads.status();
  EXPECT_TRUE(ValidateGraph(g).ok());
  auto bad = AddGradients(&g, "loss", {"unused"});
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("does not depend on variable unused"));
}

}  // namespace
}  // namespace psrt
