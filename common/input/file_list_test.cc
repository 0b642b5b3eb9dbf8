#include "common/input/file_list.h"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace psrt {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string MakeDir(const std::string& name) {
  std::string d = ::testing::TempDir() + "/" + name;
  ::mkdir(d.c_str(), 0755);
  return d;
}

void Touch(const std::string& path) { std::ofstream(path) << "x"; }

DataSource Split(std::vector<std::string> files) {
  DataSource s;
  for (auto& f : files) s.add_files(f);
  return s;
}

TEST(FileListTest, PatternMatchesSorted) {
  const std::string d = MakeDir("glob");
  // Made out of order: readdir's order is not the list's.
  for (const char* n : {"train-00003-of-00004.tfrecord.gz", "train-00000-of-00004.tfrecord.gz",
                        "train-00002-of-00004.tfrecord.gz", "train-00001-of-00004.tfrecord.gz",
                        "test-00000-of-00001.tfrecord.gz", ".train-00009-of-00004.tfrecord.gz"}) {
    Touch(d + "/" + n);
  }
  ::mkdir((d + "/train-dir-of-00004.tfrecord.gz").c_str(), 0755);  // not a regular file
  auto files = ExpandFiles(Split({d + "/train-*-of-00004.tfrecord.gz"}), "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre(d + "/train-00000-of-00004.tfrecord.gz", d + "/train-00001-of-00004.tfrecord.gz",
                                  d + "/train-00002-of-00004.tfrecord.gz", d + "/train-00003-of-00004.tfrecord.gz"));
  files = ExpandFiles(Split({d + "/train-0000[13]-of-?????.tfrecord.gz", d + "/test-00000-of-00001.tfrecord.gz"}),
                      "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre(d + "/train-00001-of-00004.tfrecord.gz", d + "/train-00003-of-00004.tfrecord.gz",
                                  d + "/test-00000-of-00001.tfrecord.gz"));
}

TEST(FileListTest, NoMatchNamesThePattern) {
  const std::string d = MakeDir("nomatch");
  Touch(d + "/a.csv");
  auto files = ExpandFiles(Split({d + "/a.csv", d + "/train-*.tfrecord"}), "input.test");
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(files.status().message(), HasSubstr("input.test.files[1]"));
  EXPECT_THAT(files.status().message(), HasSubstr(d + "/train-*.tfrecord"));
  EXPECT_THAT(files.status().message(), HasSubstr("matches no file"));
}

TEST(FileListTest, DirectoryGivesItsRegularFilesSorted) {
  const std::string d = MakeDir("dir");
  for (const char* n : {"b", "a", "c", ".hidden"}) Touch(d + "/" + n);
  MakeDir("dir/sub");
  auto files = ExpandFiles(Split({d}), "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre(d + "/a", d + "/b", d + "/c"));
  files = ExpandFiles(Split({d + "/"}), "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre(d + "/a", d + "/b", d + "/c"));
  const std::string empty = MakeDir("emptydir");
  files = ExpandFiles(Split({empty}), "input.train");
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(files.status().message(), HasSubstr("holds no file"));
}

TEST(FileListTest, PlainNamesAsTheyAre) {
  // A missing plain file is left to the reader ("cannot open"), relative
  // names stay relative.
  auto files = ExpandFiles(Split({"no/such/file.tfrecord", "relative.csv"}), "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre("no/such/file.tfrecord", "relative.csv"));
}

TEST(FileListTest, RelativePatternStaysRelative) {
  const std::string d = MakeDir("rel");
  Touch(d + "/x1.rec");
  Touch(d + "/x2.rec");
  ASSERT_EQ(::chdir(d.c_str()), 0);
  auto files = ExpandFiles(Split({"x*.rec"}), "input.train");
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_THAT(*files, ElementsAre("x1.rec", "x2.rec"));
}

TEST(FileListTest, WildcardInADirectoryRefused) {
  auto files = ExpandFiles(Split({"/tmp/*/train-*.tfrecord"}), "input.train");
  ASSERT_FALSE(files.ok());
  EXPECT_THAT(files.status().message(), HasSubstr("file name only"));
}

}  // namespace
}  // namespace psrt
