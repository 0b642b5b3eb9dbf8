#include "common/input/dataset.h"

#include <sys/resource.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <functional>
#include <set>

#include "common/io/crc32c.h"
#include "common/testing/python_tool.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::HasSubstr;

std::string WriteFile(const std::string& name, const std::string& text) {
  std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// CSV rows "i*10, i" with header "x,label": feature x = 10*i, label = i.
DatasetOptions CsvOptions(int rows) {
  std::string text = "x,label\n";
  for (int i = 0; i < rows; ++i) text += absl::StrCat(i * 10, ",", i, "\n");
  DatasetOptions o;
  o.input.set_format(InputDef::CSV);
  o.input.set_batch_size(3);
  o.input.set_label_key("label");
  auto* f = o.input.add_feature();
  f->set_name("x");
  f->add_shape(1);
  o.split.add_files(WriteFile(absl::StrCat("rows", rows, ".csv"), text));
  return o;
}

// All labels the dataset yields, batch by batch.
std::vector<std::vector<float>> Drain(Dataset* d) {
  std::vector<std::vector<float>> out;
  Batch b;
  while (true) {
    auto more = d->Next(&b);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) return out;
    const Tensor& label = b.tensors.at(kLabelKey);
    out.emplace_back(label.data<float>(), label.data<float>() + b.size);
    // Feature and label stay paired through the shuffle.
    for (int64_t i = 0; i < b.size; ++i) {
      EXPECT_EQ(b.tensors.at("x").data<float>()[i], 10 * label.data<float>()[i]);
    }
  }
}

std::vector<float> Flatten(const std::vector<std::vector<float>>& batches) {
  std::vector<float> all;
  for (const auto& b : batches) all.insert(all.end(), b.begin(), b.end());
  return all;
}

TEST(DatasetTest, ShardsPartitionTheSplitAndEpochsCoverEachOnce) {
  std::set<float> seen;
  for (int shard = 0; shard < 2; ++shard) {
    DatasetOptions o = CsvOptions(11);
    o.shard_index = shard;
    o.num_shards = 2;
    o.epochs = 2;
    auto d = Dataset::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    auto batches = Drain(d->get());
    std::vector<float> all = Flatten(batches);
    size_t per_epoch = shard == 0 ? 6 : 5;
    ASSERT_EQ(all.size(), 2 * per_epoch);
    // Batches run across the epoch end; only the last may be short.
    for (size_t i = 0; i + 1 < batches.size(); ++i) EXPECT_EQ(batches[i].size(), 3u);
    std::multiset<float> epoch0(all.begin(), all.begin() + per_epoch);
    std::multiset<float> epoch1(all.begin() + per_epoch, all.end());
    EXPECT_EQ(epoch0, epoch1);
    for (float l : epoch0) {
      EXPECT_EQ(static_cast<int>(l) % 2, shard);  // example i goes to shard i mod 2
      EXPECT_TRUE(seen.insert(l).second);
    }
  }
  EXPECT_EQ(seen.size(), 11u);
}

TEST(DatasetTest, SameSeedSameOrderAndPrefetchChangesNothing) {
  auto order = [](uint64_t seed, int prefetch, int buffer) {
    DatasetOptions o = CsvOptions(40);
    o.seed = seed;
    o.epochs = 2;
    o.prefetch_batches = prefetch;
    o.input.set_shuffle_buffer(buffer);
    return Flatten(Drain(Dataset::Create(o)->get()));
  };
  std::vector<float> a = order(7, 0, 0);
  EXPECT_EQ(a, order(7, 2, 0));
  EXPECT_NE(a, order(8, 0, 0));
  // The two epochs are shuffled differently.
  EXPECT_NE(std::vector<float>(a.begin(), a.begin() + 40), std::vector<float>(a.begin() + 40, a.end()));
  // A small shuffle buffer keeps each epoch a permutation.
  std::vector<float> small = order(7, 2, 4);
  EXPECT_EQ(std::multiset<float>(small.begin(), small.begin() + 40),
            std::multiset<float>(a.begin(), a.begin() + 40));
}

// Starting after N batches gives exactly the stream a reader of all of them
// would see next, also when N spans many (shuffled) epochs: whole epochs are
// skipped arithmetically, so a start step far in the future returns at once.
TEST(DatasetTest, SkippingBatchesIsReadingThemAcrossEpochs) {
  auto stream = [](int64_t skip, int epochs) {
    DatasetOptions o = CsvOptions(10);
    o.seed = 3;
    o.epochs = epochs;
    o.input.set_shuffle_buffer(4);
    o.skip_batches = skip;
    auto d = Dataset::Create(o);
    EXPECT_TRUE(d.ok()) << d.status();
    return d.ok() ? Flatten(Drain(d->get())) : std::vector<float>();
  };
  const std::vector<float> all = stream(0, 9);  // 90 examples, batches of 3
  ASSERT_EQ(all.size(), 90u);
  for (int64_t skip : {1, 3, 4, 7, 13, 26, 29}) {
    EXPECT_EQ(stream(skip, 9), std::vector<float>(all.begin() + 3 * skip, all.end())) << "skip " << skip;
  }
  EXPECT_TRUE(stream(30, 9).empty());  // past the last epoch
  EXPECT_TRUE(stream(int64_t{1} << 40, 9).empty());

  DatasetOptions o = CsvOptions(10);
  o.skip_batches = std::numeric_limits<int64_t>::max() - 1;  // forged: would overflow
  auto huge = Dataset::Create(o);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  o.skip_batches = int64_t{1} << 60;  // more epochs than an int counts
  huge = Dataset::Create(o);
  EXPECT_EQ(huge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(huge.status().message()), HasSubstr("epochs of 10 examples"));
}

// A job may point at any file; its errors reach whoever sent the Start, so
// they give positions, never contents.
TEST(DatasetTest, ErrorsNeverEchoWhatTheFileHolds) {
  DatasetOptions o = CsvOptions(1);
  o.split.set_files(0, WriteFile("secret.csv", "x,label\nroot:x:0:0:secret:/root:/bin/bash,1\n"));
  o.prefetch_batches = 0;
  auto d = Dataset::Create(o);
  absl::Status s = d.status();
  if (d.ok()) {
    Batch b;
    s = (*d)->Next(&b).status();
  }
  ASSERT_FALSE(s.ok());
  EXPECT_THAT(std::string(s.message()), HasSubstr("secret.csv:2: column 0"));
  EXPECT_EQ(std::string(s.message()).find("x:0:0:secret"), std::string::npos) << s;
}

TEST(DatasetTest, UnshuffledKeepsFileOrder) {
  DatasetOptions o = CsvOptions(5);
  o.shuffle = false;
  o.epochs = 1;
  EXPECT_EQ(Flatten(Drain(Dataset::Create(o)->get())), (std::vector<float>{0, 1, 2, 3, 4}));
}

TEST(DatasetTest, CsvErrorsNameFileAndLine) {
  DatasetOptions o = CsvOptions(1);
  o.split.set_files(0, WriteFile("bad.csv", "x,label\n1,0\n2,abc\n"));
  o.prefetch_batches = 0;
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok());
  Batch b;
  auto s = (*d)->Next(&b).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad.csv:3: column 1 (3 characters) is not a number"));

  o.split.set_files(0, WriteFile("ragged.csv", "x,label\n1,0\n2,1,5\n"));
  s = (*Dataset::Create(o))->Next(&b).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("ragged.csv:3: has 3 columns, expected 2"));

  o.input.set_label_key("y");
  EXPECT_THAT(std::string(Dataset::Create(o).status().message()), HasSubstr("no column \"y\""));

  o.split.set_files(0, "/nonexistent.csv");
  EXPECT_EQ(Dataset::Create(o).status().code(), absl::StatusCode::kNotFound);
}

TEST(DatasetTest, LibsvmGivesRaggedIdsWithValues) {
  DatasetOptions o;
  o.input.set_format(InputDef::LIBSVM);
  o.input.set_batch_size(4);
  o.shuffle = false;
  o.epochs = 1;
  o.split.add_files(WriteFile("a.svm", "1 3:0.5 7:1 # comment\n0 qid:2 2:2\n\n1 5:1 6:1 9:-1\n"));
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok()) << d.status();
  Batch b;
  ASSERT_TRUE(*(*d)->Next(&b));
  EXPECT_EQ(b.size, 3);
  EXPECT_EQ(std::vector<int64_t>(b.tensors["ids"].data<int64_t>(), b.tensors["ids"].data<int64_t>() + 6),
            (std::vector<int64_t>{3, 7, 2, 5, 6, 9}));
  EXPECT_EQ(std::vector<int64_t>(b.tensors["ids:row_splits"].data<int64_t>(),
                                 b.tensors["ids:row_splits"].data<int64_t>() + 4),
            (std::vector<int64_t>{0, 2, 3, 6}));
  EXPECT_EQ(b.tensors["ids:values"].data<float>()[0], 0.5f);
  EXPECT_EQ(b.tensors["label"].data<float>()[1], 0.0f);

  o.split.set_files(0, WriteFile("b.svm", "1 3:0.5\n1 x:2\n"));
  o.prefetch_batches = 0;
  auto s = (*Dataset::Create(o))->Next(&b).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("b.svm:2: token 1 (3 characters) is not id:value"));
}

DatasetOptions TfRecordOptions(const std::string& path) {
  DatasetOptions o;
  o.input.set_format(InputDef::TFRECORD);
  o.input.set_batch_size(10);
  o.input.set_num_classes(4);
  auto* image = o.input.add_feature();
  image->set_name("image");
  image->add_shape(2);
  image->add_shape(3);
  auto* ids = o.input.add_feature();
  ids->set_name("ids");
  ids->set_kind(FeatureDef::SPARSE);
  o.split.add_files(path);
  o.shuffle = false;
  o.epochs = 1;
  o.prefetch_batches = 0;
  return o;
}

TEST(DatasetTest, ReadsTfRecordExamplesWrittenByOtherCode) {
  std::string path = ::testing::TempDir() + "/examples.tfrecord";
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/write_tfrecords.py", {"examples", path}).ok());
  auto d = Dataset::Create(TfRecordOptions(path));
  ASSERT_TRUE(d.ok()) << d.status();
  Batch b;
  auto more = (*d)->Next(&b);
  ASSERT_TRUE(more.ok()) << more.status();
  EXPECT_EQ(b.size, 10);
  const Tensor& image = b.tensors["image"];
  EXPECT_EQ(image.shape(), TensorShape({10, 2, 3}));
  EXPECT_EQ(image.data<float>()[7 * 6 + 5], 7.0f + 2.5f);
  EXPECT_EQ(b.tensors["label"].dtype(), DT_INT64);
  EXPECT_EQ(b.tensors["label"].data<int64_t>()[7], 3);
  // Example i has 1 + i % 3 ids: i, i+100, i+200.
  const int64_t* splits = b.tensors["ids:row_splits"].data<int64_t>();
  EXPECT_EQ(splits[10], 1 + 2 + 3 + 1 + 2 + 3 + 1 + 2 + 3 + 1);
  EXPECT_EQ(b.tensors["ids"].data<int64_t>()[splits[5] + 2], 205);
}

TEST(DatasetTest, TruncatedOrCorruptTfRecordNamesFileAndRecord) {
  std::string path = ::testing::TempDir() + "/good.tfrecord";
  ASSERT_TRUE(testing::RunPythonTool("tests/tools/write_tfrecords.py", {"examples", path}).ok());
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Batch b;
  std::string cut = WriteFile("cut.tfrecord", bytes.substr(0, bytes.size() - 10));
  auto s = (*Dataset::Create(TfRecordOptions(cut)))->Next(&b).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("cut.tfrecord: record 9"));
  bytes[40] ^= 0x10;
  std::string flipped = WriteFile("flip.tfrecord", bytes);
  s = (*Dataset::Create(TfRecordOptions(flipped)))->Next(&b).status();
  EXPECT_THAT(std::string(s.message()), HasSubstr("flip.tfrecord: record 0"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("CRC mismatch"));
}

// The first error of a dataset: from Create, else from its first batch.
absl::Status FirstError(const DatasetOptions& o) {
  auto d = Dataset::Create(o);
  if (!d.ok()) return d.status();
  Batch b;
  return (*d)->Next(&b).status();
}

// tests/tools/write_with_tensorflow.py's pixels.gzip.tfrecord: 10 Examples
// written by TensorFlow with compression_type="GZIP", "image" a 4x3 uint8
// array's tobytes() (pixel k of example i is (20k + i) % 256), "short" the
// same cut to 11 bytes in even examples, "label" i % 3.
DatasetOptions PixelOptions(const std::string& feature) {
  static const std::string* dir = [] {
    auto* d = new std::string(::testing::TempDir() + "/tf_pixels");
    EXPECT_EQ(std::system(("mkdir -p " + *d).c_str()), 0);
    absl::Status s = testing::RunPythonTool("tests/tools/write_with_tensorflow.py", {*d}, "",
                                            testing::kVenvTfPython);
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }();
  DatasetOptions o;
  o.input.set_format(InputDef::TFRECORD);
  o.input.set_batch_size(10);
  o.input.set_num_classes(3);
  auto* image = o.input.add_feature();
  image->set_name(feature);
  image->add_shape(4);
  image->add_shape(3);
  image->set_decode(FeatureDef::RAW_UINT8);
  image->set_scale(1.0f / 255);
  o.split.add_files(*dir + "/pixels.gzip.tfrecord");
  o.shuffle = false;
  o.epochs = 1;
  o.prefetch_batches = 0;
  return o;
}

TEST(DatasetTest, DecodesRawUint8PixelsFromGzipTfRecordsTensorFlowWrote) {
  for (const char* compression : {"GZIP", "", "AUTO"}) {
    SCOPED_TRACE(compression);
    DatasetOptions o = PixelOptions("image");
    o.input.set_compression(compression);
    auto d = Dataset::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    Batch b;
    auto more = (*d)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    const Tensor& image = b.tensors["image"];
    ASSERT_EQ(image.shape(), TensorShape({10, 4, 3}));
    EXPECT_EQ(image.data<float>()[0], 0.0f);
    EXPECT_FLOAT_EQ(image.data<float>()[3 * 12 + 1], 23.0f / 255);
    EXPECT_FLOAT_EQ(image.data<float>()[7 * 12 + 11], 227.0f / 255);  // row 3, column 2
    EXPECT_FLOAT_EQ(image.data<float>()[9 * 12 + 5], 109.0f / 255);
    EXPECT_EQ(b.tensors["label"].data<int64_t>()[7], 1);
  }
  // Compressed data told NONE is refused at its first record.
  DatasetOptions none = PixelOptions("image");
  none.input.set_compression("NONE");
  EXPECT_THAT(std::string(FirstError(none).message()), HasSubstr("record 0 at byte 0: length CRC mismatch"));
}

TEST(DatasetTest, RawUint8OfTheWrongLengthOrKindNamesFeatureAndRecord) {
  absl::Status s = FirstError(PixelOptions("short"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("pixels.gzip.tfrecord: record 0: feature \"short\" (decode: RAW_UINT8) has 11 bytes, "
                        "its shape needs 12"));
  s = FirstError(PixelOptions("label"));
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("record 0: feature \"label\" (decode: RAW_UINT8) is not a bytes_list of one value"));
  // Without decode: RAW_UINT8 a bytes_list is not numbers.
  DatasetOptions numbers = PixelOptions("image");
  numbers.input.mutable_feature(0)->clear_decode();
  numbers.input.mutable_feature(0)->clear_scale();
  EXPECT_THAT(std::string(FirstError(numbers).message()), HasSubstr("feature \"image\" is not numeric"));
}

TEST(DatasetTest, BadCompressionOrDecodeIsRefusedNamingTheField) {
  const std::vector<std::pair<std::function<void(InputDef*)>, std::string>> cases = {
      {[](InputDef* i) { i->set_compression("LZ4"); },
       "input.compression: unknown compression \"LZ4\" (AUTO, NONE, GZIP or ZLIB)"},
      {[](InputDef* i) { i->set_format(InputDef::CSV); i->set_compression("GZIP"); },
       "input.compression: only TFRecord input takes it"},
      {[](InputDef* i) { i->mutable_feature(0)->set_kind(FeatureDef::SPARSE); },
       "input.feature[0] (\"image\").decode: RAW_UINT8 needs a DENSE feature"},
      {[](InputDef* i) { i->set_format(InputDef::CSV); },
       "input.feature[0] (\"image\").decode: RAW_UINT8 needs TFRecord input"},
      {[](InputDef* i) { i->mutable_feature(0)->set_scale(-1); },
       "input.feature[0] (\"image\").scale: must be finite and positive, got -1"},
      {[](InputDef* i) { i->mutable_feature(0)->set_scale(std::numeric_limits<float>::quiet_NaN()); },
       "input.feature[0] (\"image\").scale: must be finite and positive, got nan"},
      {[](InputDef* i) { i->mutable_feature(0)->clear_decode(); },
       "input.feature[0] (\"image\").scale: only decode: RAW_UINT8 or ENCODED_IMAGE takes it"},
      {[](InputDef* i) { i->mutable_feature(0)->set_decode(FeatureDef::ENCODED_IMAGE); },
       "input.feature[0] (\"image\").shape: decode: ENCODED_IMAGE needs [height, width, channels]"},
      {[](InputDef* i) { i->set_scale(1.0f / 255); },
       "input.feature[0] (\"image\").scale (0.00392157) and input.scale (0.00392157) would both scale this "
       "feature, one after the other: keep one"},
      {[](InputDef* i) { i->mutable_feature(0)->set_shape(1, 0); },
       "input.feature[0] (\"image\").shape: dimension 0 is not positive"},
      {[](InputDef* i) { i->mutable_feature(0)->set_shape(1, int64_t{1} << 40); },
       "makes over 2^31 bytes"},
  };
  for (const auto& [edit, message] : cases) {
    DatasetOptions o = PixelOptions("image");
    edit(&o.input);
    absl::Status s = FirstError(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << message;
    EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  }
}

// tests/tools/write_images_with_tensorflow.py's files (see its docstring):
// PNG and JPEG images TensorFlow encoded, and its own decode of each.
const std::string& ImageDir() {
  static const std::string* dir = [] {
    auto* d = new std::string(::testing::TempDir() + "/tf_images");
    EXPECT_EQ(std::system(("mkdir -p " + *d).c_str()), 0);
    absl::Status s = testing::RunPythonTool("tests/tools/write_images_with_tensorflow.py", {*d}, "",
                                            testing::kVenvTfPython);
    EXPECT_TRUE(s.ok()) << s;
    return d;
  }();
  return *dir;
}

FeatureDef* AddImageFeature(InputDef* input, const std::string& name, FeatureDef::Decode decode,
                            std::vector<int64_t> shape) {
  FeatureDef* f = input->add_feature();
  f->set_name(name);
  f->set_decode(decode);
  for (int64_t d : shape) f->add_shape(d);
  return f;
}

DatasetOptions ImageOptions(const std::string& file) {
  DatasetOptions o;
  o.input.set_format(InputDef::TFRECORD);
  o.input.set_batch_size(8);
  o.input.set_num_classes(3);
  o.split.add_files(ImageDir() + "/" + file);
  o.shuffle = false;
  o.epochs = 1;
  o.prefetch_batches = 0;
  return o;
}

TEST(DatasetTest, EncodedImagesDecodeAsTensorFlowDecodesThem) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> images = {
      {"png", {28, 28, 1}}, {"jpeg", {28, 28, 1}}, {"rgb_png", {8, 6, 3}}, {"rgb_jpeg", {8, 6, 3}}};
  for (const auto& [name, shape] : images) {
    SCOPED_TRACE(name);
    DatasetOptions o = ImageOptions("images.tfrecord");
    AddImageFeature(&o.input, name, FeatureDef::ENCODED_IMAGE, shape);
    AddImageFeature(&o.input, name + "_tf", FeatureDef::RAW_UINT8, shape);
    auto d = Dataset::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    Batch b;
    auto more = (*d)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    ASSERT_EQ(b.size, 8);
    const Tensor& ours = b.tensors[name];
    const Tensor& theirs = b.tensors[name + "_tf"];
    ASSERT_EQ(ours.shape(), theirs.shape());
    ASSERT_EQ(ours.shape(), TensorShape({8, shape[0], shape[1], shape[2]}));
    float worst = 0;
    for (int64_t i = 0; i < ours.NumElements(); ++i) {
      worst = std::max(worst, std::abs(ours.data<float>()[i] - theirs.data<float>()[i]));
    }
    // JPEG too: both are libjpeg-turbo with its accurate integer DCT.
    EXPECT_EQ(worst, 0.0f);
    EXPECT_EQ(b.tensors["label"].data<int64_t>()[4], 1);
  }
}

TEST(DatasetTest, EncodedImageIsScaledByTheFeatureScale) {
  DatasetOptions o = ImageOptions("images.tfrecord");
  AddImageFeature(&o.input, "png", FeatureDef::ENCODED_IMAGE, {28, 28, 1})->set_scale(1.0f / 255);
  AddImageFeature(&o.input, "png_tf", FeatureDef::RAW_UINT8, {28, 28, 1});
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok()) << d.status();
  Batch b;
  ASSERT_TRUE(*(*d)->Next(&b));
  for (int64_t i = 0; i < b.tensors["png"].NumElements(); ++i) {
    ASSERT_FLOAT_EQ(b.tensors["png"].data<float>()[i], b.tensors["png_tf"].data<float>()[i] * (1.0f / 255));
  }
}

TEST(DatasetTest, CorruptOrWrongSizeImagesAreRefusedNamingFeatureAndRecord) {
  DatasetOptions cut = ImageOptions("bad.tfrecord");
  AddImageFeature(&cut.input, "png", FeatureDef::ENCODED_IMAGE, {28, 28, 1});
  absl::Status s = FirstError(cut);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("bad.tfrecord: record 1: feature \"png\" (decode: ENCODED_IMAGE) is a corrupt PNG (libpng: "));

  DatasetOptions crc = ImageOptions("bad_crc.tfrecord");
  AddImageFeature(&crc.input, "png", FeatureDef::ENCODED_IMAGE, {28, 28, 1});
  s = FirstError(crc);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("bad_crc.tfrecord: record 0: feature \"png\" (decode: ENCODED_IMAGE) is a corrupt PNG"));

  DatasetOptions jpeg = ImageOptions("bad_jpeg.tfrecord");
  AddImageFeature(&jpeg.input, "jpeg", FeatureDef::ENCODED_IMAGE, {28, 28, 1});
  s = FirstError(jpeg);
  EXPECT_THAT(std::string(s.message()), HasSubstr("bad_jpeg.tfrecord: record 1: feature \"jpeg\" "
                                                  "(decode: ENCODED_IMAGE) is a corrupt JPEG (libjpeg: "));

  const std::vector<std::pair<std::vector<int64_t>, std::string>> shapes = {
      {{27, 28, 1}, "is a 28x28x1 PNG (height x width x channels), its shape needs 27x28x1"},
      {{28, 28, 3}, "is a 28x28x1 PNG (height x width x channels), its shape needs 28x28x3"},
      {{1 << 14, 1 << 14, 3}, "is a 28x28x1 PNG"},
  };
  for (const auto& [shape, message] : shapes) {
    DatasetOptions o = ImageOptions("images.tfrecord");
    AddImageFeature(&o.input, "png", FeatureDef::ENCODED_IMAGE, shape);
    s = FirstError(o);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("images.tfrecord: record 0: feature \"png\" (decode: ENCODED_IMAGE) " + message));
  }
  DatasetOptions rgb = ImageOptions("images.tfrecord");
  AddImageFeature(&rgb.input, "rgb_jpeg", FeatureDef::ENCODED_IMAGE, {6, 8, 3});
  EXPECT_THAT(std::string(FirstError(rgb).message()),
              HasSubstr("feature \"rgb_jpeg\" (decode: ENCODED_IMAGE) is a 8x6x3 JPEG (height x width x channels), "
                        "its shape needs 6x8x3"));
  // Raw pixels are not an image.
  DatasetOptions raw = ImageOptions("images.tfrecord");
  AddImageFeature(&raw.input, "png_tf", FeatureDef::ENCODED_IMAGE, {28, 28, 1});
  EXPECT_THAT(std::string(FirstError(raw).message()),
              HasSubstr("feature \"png_tf\" (decode: ENCODED_IMAGE) is neither a PNG nor a JPEG image (784 bytes"));
}

TEST(DatasetTest, RawUint8OfAnEncodedImageSaysSo) {
  for (const char* name : {"png", "jpeg"}) {
    DatasetOptions o = ImageOptions("images.tfrecord");
    AddImageFeature(&o.input, name, FeatureDef::RAW_UINT8, {28, 28, 1});
    absl::Status s = FirstError(o);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("feature \"", name, "\" (decode: RAW_UINT8) has ")));
    EXPECT_THAT(std::string(s.message()),
                HasSubstr(absl::StrCat("its shape needs 784; it looks like a ", name == std::string("png") ? "PNG" : "JPEG",
                                       " image: use decode: ENCODED_IMAGE")));
  }
}

TEST(DatasetTest, ShardsReadByGlobAndDirectory) {
  // The same records by a pattern, by the directory and by name.
  const std::string dir = ::testing::TempDir() + "/shards";
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && cp " + ImageDir() + "/images.tfrecord " + dir +
                         "/train-00001-of-00002.tfrecord && cp " + ImageDir() + "/images.tfrecord " + dir +
                         "/train-00000-of-00002.tfrecord").c_str()),
            0);
  std::vector<int64_t> sizes;
  for (const std::string& entry : {dir + "/train-*-of-00002.tfrecord", dir}) {
    SCOPED_TRACE(entry);
    DatasetOptions o = ImageOptions("images.tfrecord");
    o.split.set_files(0, entry);
    o.input.set_batch_size(100);
    AddImageFeature(&o.input, "png_tf", FeatureDef::RAW_UINT8, {28, 28, 1});
    auto d = Dataset::Create(o);
    ASSERT_TRUE(d.ok()) << d.status();
    Batch b;
    auto more = (*d)->Next(&b);
    ASSERT_TRUE(more.ok()) << more.status();
    sizes.push_back(b.size);
  }
  EXPECT_THAT(sizes, ::testing::ElementsAre(16, 16));
  DatasetOptions none = ImageOptions("images.tfrecord");
  none.split.set_files(0, dir + "/test-*.tfrecord");
  AddImageFeature(&none.input, "png_tf", FeatureDef::RAW_UINT8, {28, 28, 1});
  absl::Status s = FirstError(none);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("input split.files[0] \"" + dir + "/test-*.tfrecord\": the pattern matches no file"));
}

constexpr char kFashion[] = "/usr/share/datasets/fashion-mnist/";

TEST(DatasetTest, FashionMnistTestSplitFromIdx) {
  DatasetOptions o;
  o.input.set_format(InputDef::IDX);
  o.input.set_batch_size(1000);
  o.input.set_num_classes(10);
  o.input.set_scale(1.0f / 255);
  o.split.add_files(absl::StrCat(kFashion, "t10k-images-idx3-ubyte.gz"));
  o.split.set_labels_file(absl::StrCat(kFashion, "t10k-labels-idx1-ubyte.gz"));
  o.epochs = 1;
  o.shard_index = 1;
  o.num_shards = 2;
  auto d = Dataset::Create(o);
  ASSERT_TRUE(d.ok()) << d.status();
  int64_t n = 0;
  std::vector<int> counts(10);
  Batch b;
  while (*(*d)->Next(&b)) {
    EXPECT_EQ(b.tensors["image"].shape().dims(), (std::vector<int64_t>{b.size, 28, 28, 1}));
    const float* px = b.tensors["image"].data<float>();
    for (int64_t i = 0; i < b.tensors["image"].NumElements(); ++i) {
      ASSERT_TRUE(px[i] >= 0 && px[i] <= 1);
    }
    for (int64_t i = 0; i < b.size; ++i) counts[b.tensors["label"].data<int64_t>()[i]]++;
    n += b.size;
  }
  EXPECT_EQ(n, 5000);
  for (int c : counts) EXPECT_GT(c, 400);  // 1000 per class in the whole split
}

// Found by tests/fuzz/input_source_fuzzer: dims whose product overflows
// int64 (2 x 2^31 x 2^31 x 2^31 x 2^31 x 2 wraps to 0, the data's size).
TEST(DatasetTest, IdxDimsThatOverflowAreRefused) {
  std::string header("\x00\x00\x08\x06\x00\x00\x00\x02", 8);
  for (int i = 0; i < 4; ++i) header += std::string("\x80\x00\x00\x00", 4);
  header += std::string("\x00\x00\x00\x02", 4);
  InputDef input;
  input.set_format(InputDef::IDX);
  DataSource split;
  split.add_files(WriteFile("overflow.idx", header));
  split.set_labels_file(WriteFile("overflow-labels.idx", std::string("\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02", 10)));
  ASSERT_TRUE(FillDefaultFeatures(&input).ok());
  auto source = OpenSource(input, split);
  EXPECT_EQ(source.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(source.status().message()), HasSubstr("dims overflow"));
}

// Found by tests/fuzz/input_source_fuzzer: after a bad line the text
// readers carried on at the next, though source.h says a failed source
// stays failed (until Reset).
TEST(DatasetTest, AFailedSourceStaysFailedUntilReset) {
  InputDef input;
  input.set_format(InputDef::LIBSVM);
  ASSERT_TRUE(FillDefaultFeatures(&input).ok());
  DataSource split;
  split.add_files(WriteFile("sticky.svm", "1 x:2\n1 3:1\n"));
  auto source = OpenSource(input, split);
  ASSERT_TRUE(source.ok()) << source.status();
  Example ex;
  auto first = (*source)->Next(&ex);
  ASSERT_FALSE(first.ok());
  auto second = (*source)->Next(&ex);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status(), first.status());
  ASSERT_TRUE((*source)->Reset().ok());
  EXPECT_FALSE((*source)->Next(&ex).ok());  // the same bad first line again
}

// Found by tests/fuzz/input_source_fuzzer: a "nan" label cast to int64 (UB).
TEST(DatasetTest, ANanClassLabelIsRefused) {
  InputDef input;
  input.set_format(InputDef::LIBSVM);
  input.set_num_classes(3);
  ASSERT_TRUE(FillDefaultFeatures(&input).ok());
  Example ex;
  ex.features.resize(1);
  ex.label = std::numeric_limits<float>::quiet_NaN();
  auto batch = MakeBatch(input, {ex});
  EXPECT_EQ(batch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(batch.status().message()), HasSubstr("not a class index"));
}

TEST(DatasetTest, TruncatedIdxIsRefusedNamingTheFile) {
  std::string header("\x00\x00\x08\x03\x00\x00\x00\x02\x00\x00\x00\x02\x00\x00\x00\x02", 16);
  std::string images = WriteFile("short-images.idx", header + std::string(7, '\x01'));
  std::string labels = WriteFile("labels.idx", std::string("\x00\x00\x08\x01\x00\x00\x00\x02\x01\x02", 10));
  DatasetOptions o;
  o.input.set_format(InputDef::IDX);
  o.input.set_batch_size(2);
  o.split.add_files(images);
  o.split.set_labels_file(labels);
  auto d = Dataset::Create(o);
  EXPECT_EQ(d.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(d.status().message()), HasSubstr("short-images.idx: IDX data is 7 bytes"));
  o.split.set_files(0, WriteFile("text.idx", "hello world"));
  EXPECT_THAT(std::string(Dataset::Create(o).status().message()), HasSubstr("bad magic"));
}

namespace record_bound {

// The peak resident memory of this process, in KiB.
int64_t PeakRssKb() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss;
}

// A gzip file of `head` and then `zeros` zero bytes (a few hundred KB
// compressed per 512 MiB), deflated a MiB at a time so that writing it
// costs no memory.
std::string WriteGzipOfZeros(const std::string& path, const std::string& head, int64_t zeros) {
  std::ofstream out(path, std::ios::binary);
  z_stream zs{};
  EXPECT_EQ(deflateInit2(&zs, 1, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY), Z_OK);
  std::string in(1 << 20, '\0'), buf(1 << 20, '\0');
  auto pump = [&](const char* data, size_t n, int flush) {
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
    zs.avail_in = static_cast<uInt>(n);
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf.data());
      zs.avail_out = static_cast<uInt>(buf.size());
      deflate(&zs, flush);
      out.write(buf.data(), static_cast<std::streamsize>(buf.size() - zs.avail_out));
    } while (zs.avail_out == 0);
  };
  pump(head.data(), head.size(), Z_NO_FLUSH);
  for (int64_t done = 0; done < zeros; done += static_cast<int64_t>(in.size())) pump(in.data(), in.size(), Z_NO_FLUSH);
  pump(nullptr, 0, Z_FINISH);
  deflateEnd(&zs);
  return path;
}

// A gzip TFRecord file whose one record says it is 4 GiB and whose stream
// holds `zeros` bytes of it.
std::string WriteHugeGzipRecord(const std::string& path, int64_t zeros) {
  char header[12];
  const uint64_t length = uint64_t{1} << 32;
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>((length >> (8 * i)) & 0xff);
  const uint32_t crc = crc32c::Mask(crc32c::Value(header, 8));
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>((crc >> (8 * i)) & 0xff);
  return WriteGzipOfZeros(path, std::string(header, sizeof(header)), zeros);
}

// Reading `o` fails with `code`, its message holding `message`, and this
// process's peak memory grows by less than `max_growth_kb` (else `what` was
// read whole).
void ExpectRefusedUnread(const DatasetOptions& o, absl::StatusCode code, const std::string& message,
                         int64_t max_growth_kb, const std::string& what) {
  const int64_t before_kb = PeakRssKb();
  absl::Status s = FirstError(o);
  EXPECT_EQ(s.code(), code) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(message));
  const int64_t after_kb = PeakRssKb();
  std::cout << "peak RSS before reading " << before_kb << " KiB, after " << after_kb << " KiB\n";
  EXPECT_LT(after_kb - before_kb, max_growth_kb) << what << " was read whole";
}

// One gzip record that inflates to 4 GiB (a 4 MB file) took a worker to
// 4.1 GB: the record grew as its bytes arrived. Now its length is refused
// against the job's bound (input.max_record_mb, 64 MiB by default) before
// a byte of it is inflated, naming the bound and how to raise it.
TEST(DatasetTest, AGzipRecordLargerThanTheBoundIsRefusedBeforeItIsInflated) {
  const std::string path = WriteHugeGzipRecord(::testing::TempDir() + "/huge.gzip.tfrecord", int64_t{512} << 20);
  ExpectRefusedUnread(TfRecordOptions(path), absl::StatusCode::kDataLoss,
                      "huge.gzip.tfrecord: record 0 at inflated byte 0: a record of 4294967296 bytes, more than the "
                      "bound of 67108864 (input { max_record_mb: 64 } in the job): not read",
                      64 * 1024, "the record");
}

// A gzip IDX file whose header gives one 28x28 image (784 bytes) and whose
// stream inflates to 512 MiB (a 500 KB file) was inflated whole, then
// copied. Now it is read against its header's size and refused a byte past
// it, naming the file and the size.
TEST(DatasetTest, AGzipIdxFileInflatingPastItsHeaderIsRefusedUnread) {
  const std::string head("\0\0\x08\x03\0\0\0\x01\0\0\0\x1c\0\0\0\x1c", 16);
  const std::string images =
      WriteGzipOfZeros(::testing::TempDir() + "/bomb-images-idx3-ubyte.gz", head, int64_t{512} << 20);
  const std::string labels = WriteFile("bomb-labels-idx1-ubyte", std::string("\0\0\x08\x01\0\0\0\x01\x05", 9));
  DatasetOptions o;
  o.input.set_format(InputDef::IDX);
  o.input.set_batch_size(1);
  o.input.set_num_classes(10);
  ASSERT_TRUE(FillDefaultFeatures(&o.input).ok());
  o.split.add_files(images);
  o.split.set_labels_file(labels);
  ExpectRefusedUnread(o, absl::StatusCode::kDataLoss,
                      "bomb-images-idx3-ubyte.gz: IDX data is more than the 784 bytes its header gives (1 x 28 x 28): "
                      "refused unread past them",
                      16 * 1024, "the file");
}

// std::getline read a CSV or libsvm line whole, however long: a file of one
// 100 MiB line took 100 MiB (and more as it grew). Now a line is refused
// once it passes input.max_record_mb, naming file, line and bound.
TEST(DatasetTest, ALineLongerThanTheBoundIsRefusedNamingFileLineAndBound) {
  const std::string path = ::testing::TempDir() + "/long_line.svm";
  {
    std::ofstream out(path, std::ios::binary);
    out << "1 1:0.5\n2 ";
    const std::string chunk(1 << 20, '7');
    for (int i = 0; i < 100; ++i) out << chunk;
    out << ":1\n";
  }
  DatasetOptions o;
  o.input.set_format(InputDef::LIBSVM);
  o.input.set_batch_size(1);
  o.input.set_max_record_mb(8);
  o.split.add_files(path);
  ExpectRefusedUnread(o, absl::StatusCode::kResourceExhausted,
                      "long_line.svm:2: a line longer than the bound of 8388608 bytes (input { max_record_mb: 8 } in "
                      "the job): not read",
                      48 * 1024, "the line");
}

}  // namespace record_bound

}  // namespace
}  // namespace psrt
