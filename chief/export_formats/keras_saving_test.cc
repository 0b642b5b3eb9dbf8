// The Keras 3 files of the example models with made-up weights: the HDF5
// layout read back with libhdf5, the archive's entries, and every mismatch
// between job and values refused naming the variable. tests/export_test.cc
// loads real exports with Keras itself.
#include "chief/export_formats/keras_saving.h"

#include <hdf5.h>

#include "absl/strings/match.h"
#include "chief/export_formats/testing.h"
#include "chief/export_formats/zip_writer.h"
#include "common/graph/model_compiler.h"
#include "common/plan/job_planner.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

TrainingJob Load(const std::string& path) { return testing::LoadExample(path); }

// Every variable of the job's model, element i holding i.
std::map<std::string, Tensor> Counting(const TrainingJob& job) {
  auto m = CompileModel(job);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? testing::Counting(*m) : std::map<std::string, Tensor>();
}

// The dims of dataset `path` of the HDF5 file image `bytes`, and its first
// value in *first; empty if it is not there.
std::vector<hsize_t> DatasetDims(const std::string& bytes, const std::string& path, float* first) {
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
  H5Pset_fapl_core(fapl, 1 << 20, 0);
  std::string copy = bytes;
  H5Pset_file_image(fapl, copy.data(), copy.size());
  hid_t file = H5Fopen("image.h5", H5F_ACC_RDONLY, fapl);
  H5Pclose(fapl);
  std::vector<hsize_t> dims;
  if (file < 0) return dims;
  hid_t ds = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (ds >= 0) {
    hid_t space = H5Dget_space(ds);
    dims.resize(H5Sget_simple_extent_ndims(space));
    H5Sget_simple_extent_dims(space, dims.data(), nullptr);
    std::vector<float> all(H5Sget_simple_extent_npoints(space));
    H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, all.data());
    *first = all.empty() ? -1 : all[all.size() > 1 ? 1 : 0];
    H5Sclose(space);
    H5Dclose(ds);
  }
  H5Fclose(file);
  return dims;
}

TEST(KerasWeightsH5Test, CnnLayersAreFiledByClassAsKerasFilesThem) {
  TrainingJob job = Load("examples/fashion_mnist_cnn.pbtxt");
  auto h5 = KerasWeightsH5(job, Counting(job));
  ASSERT_TRUE(h5.ok()) << h5.status();
  ASSERT_TRUE(absl::StartsWith(*h5, "\x89HDF\r\n\x1a\n"));
  float first = 0;
  // The second Conv2D of the model is "conv2d_1"; its kernel is variable 0.
  EXPECT_EQ(DatasetDims(*h5, "layers/conv2d_1/vars/0", &first), (std::vector<hsize_t>{3, 3, 32, 64}));
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ(DatasetDims(*h5, "layers/dense_1/vars/1", &first), (std::vector<hsize_t>{10}));
  EXPECT_TRUE(DatasetDims(*h5, "layers/dense_2/vars/0", &first).empty());  // two Dense layers only
  EXPECT_TRUE(DatasetDims(*h5, "layers/dropout/vars/0", &first).empty());
}

TEST(KerasWeightsH5Test, AMissingVariableIsNamed) {
  TrainingJob job = Load("examples/fashion_mnist_mlp.pbtxt");
  auto values = Counting(job);
  values.erase("dense_3/bias");
  auto h5 = KerasWeightsH5(job, values);
  ASSERT_FALSE(h5.ok());
  EXPECT_EQ(h5.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(absl::StrContains(h5.status().message(), "no variable dense_3/bias")) << h5.status();
}

TEST(KerasWeightsH5Test, AVariableNoLayerHasIsNamedNotDropped) {
  TrainingJob job = Load("examples/fashion_mnist_mlp.pbtxt");
  auto values = Counting(job);
  values["dense_9/kernel"] = Tensor::Zeros(DT_FLOAT, TensorShape({2, 2}));
  auto h5 = KerasWeightsH5(job, values);
  ASSERT_FALSE(h5.ok());
  EXPECT_EQ(h5.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(h5.status().message(), "holds variable dense_9/kernel")) << h5.status();
}

TEST(KerasWeightsH5Test, AShapeTheLayerCannotHoldIsNamed) {
  TrainingJob job = Load("examples/fashion_mnist_mlp.pbtxt");
  auto values = Counting(job);
  values["dense_1/kernel"] = Tensor::Zeros(DT_FLOAT, TensorShape({784, 255}));
  auto h5 = KerasWeightsH5(job, values);
  ASSERT_FALSE(h5.ok());
  EXPECT_EQ(h5.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(h5.status().message(), "variable dense_1/kernel is float32 [784,255]"))
      << h5.status();
  EXPECT_TRUE(absl::StrContains(h5.status().message(), "needs float32 [?,256]")) << h5.status();
}

TEST(KerasArchiveTest, HoldsConfigMetadataAndWeights) {
  TrainingJob job = Load("examples/fashion_mnist_cnn.pbtxt");
  auto zip = KerasArchive(job, Counting(job));
  ASSERT_TRUE(zip.ok()) << zip.status();
  EXPECT_TRUE(absl::StartsWith(*zip, "PK\x03\x04"));
  for (const char* name : {"config.json", "metadata.json", "model.weights.h5"}) {
    EXPECT_TRUE(absl::StrContains(*zip, name)) << name;
  }
  auto config = KerasModelConfig(job);
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(absl::StrContains(*config, "\"class_name\": \"Sequential\"")) << *config;
  EXPECT_TRUE(absl::StrContains(*config, "\"batch_shape\": [null, 28, 28, 1]")) << *config;
  EXPECT_TRUE(absl::StrContains(*config, "\"class_name\": \"MaxPooling2D\"")) << *config;
}

TEST(KerasArchiveTest, AnEmbeddingIsRefusedNamingTheLayer) {
  TrainingJob job = Load("examples/sparse_libsvm.pbtxt");
  auto config = KerasModelConfig(job);
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(config.status().message(), "model.sequential.layer[0]")) << config.status();
  EXPECT_TRUE(absl::StrContains(config.status().message(), "no built-in Keras layer")) << config.status();
}

TEST(StoredZipTest, RefusesNamesThatEscapeOrRepeat) {
  for (const char* bad : {"", "/etc/passwd", "a/../../b", "a\\b"}) {
    auto zip = StoredZip({{bad, "x"}});
    EXPECT_FALSE(zip.ok()) << bad;
  }
  auto twice = StoredZip({{"a", "1"}, {"a", "2"}});
  ASSERT_FALSE(twice.ok());
  EXPECT_TRUE(absl::StrContains(twice.status().message(), "entry a twice")) << twice.status();
}

TEST(StoredZipTest, EndsWithADirectoryOfEveryEntry) {
  auto zip = StoredZip({{"a.json", "{}"}, {"b", ""}});
  ASSERT_TRUE(zip.ok()) << zip.status();
  // End of central directory: 22 bytes, 2 entries, no comment.
  ASSERT_GE(zip->size(), 22u);
  const std::string eocd = zip->substr(zip->size() - 22);
  EXPECT_EQ(eocd.substr(0, 4), std::string("PK\x05\x06"));
  EXPECT_EQ(static_cast<unsigned char>(eocd[10]), 2);
}

}  // namespace
}  // namespace psrt
