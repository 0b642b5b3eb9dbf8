#include "common/input/image_decode.h"

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

#include "absl/strings/str_cat.h"

namespace psrt {
namespace {

constexpr unsigned char kPngMagic[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

std::string Dims(int64_t h, int64_t w, int64_t c) { return absl::StrCat(h, "x", w, "x", c); }

// ---- PNG

// Plain data only: it lives across setjmp/longjmp.
struct PngState {
  const unsigned char* data;
  size_t size;
  size_t pos;
  char error[200];
};

void PngError(png_structp png, png_const_charp msg) {
  auto* st = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(st->error, sizeof(st->error), "%s", msg);
  png_longjmp(png, 1);
}

void PngWarning(png_structp, png_const_charp) {}  // not worth a log line per record

void PngRead(png_structp png, png_bytep out, png_size_t n) {
  auto* st = static_cast<PngState*>(png_get_io_ptr(png));
  if (n > st->size - st->pos) png_error(png, "the image is cut short");
  std::memcpy(out, st->data + st->pos, n);
  st->pos += n;
}

// Runs libpng between setjmp and its longjmps. Only plain data and
// pointers set before setjmp are used after a longjmp. `rows` is sized by
// the caller's frame, never here. Returns false with st->error set.
bool DecodePngRaw(PngState* st, png_structp png, png_infop info, int64_t height, int64_t width, int64_t channels,
                  std::vector<uint8_t>* out, std::vector<png_bytep>* rows, char* mismatch, size_t mismatch_size) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_read_fn(png, st, PngRead);
  png_set_chunk_malloc_max(png, 1 << 20);  // ancillary chunks (text, ICC profiles)
  png_read_info(png, info);                // the header: nothing sized by the image yet
  const int64_t h = png_get_image_height(png, info);
  const int64_t w = png_get_image_width(png, info);
  // The channels once expanded: palette -> RGB, transparency -> alpha.
  const int color = png_get_color_type(png, info);
  const bool trns = png_get_valid(png, info, PNG_INFO_tRNS) != 0;
  const int64_t c = ((color & PNG_COLOR_MASK_COLOR) ? 3 : 1) + ((trns || (color & PNG_COLOR_MASK_ALPHA)) ? 1 : 0);
  if (h != height || w != width || c != channels) {
    std::snprintf(mismatch, mismatch_size, "is a %s PNG (height x width x channels), its shape needs %s",
                  Dims(h, w, c).c_str(), Dims(height, width, channels).c_str());
    return true;
  }
  png_set_expand(png);  // palette -> RGB, gray < 8 bits -> 8 bits, tRNS -> alpha
  png_set_strip_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);  // row buffers of the width checked above
  if (png_get_channels(png, info) != channels || png_get_rowbytes(png, info) != static_cast<size_t>(w * c)) {
    std::snprintf(mismatch, mismatch_size, "is a PNG that decodes to %s channels, %zu bytes a row; its shape needs %s",
                  std::to_string(png_get_channels(png, info)).c_str(), png_get_rowbytes(png, info),
                  Dims(height, width, channels).c_str());
    return true;
  }
  out->resize(static_cast<size_t>(h * w * c));
  rows->resize(static_cast<size_t>(h));
  for (int64_t y = 0; y < h; ++y) (*rows)[y] = out->data() + y * w * c;
  png_read_image(png, rows->data());
  png_read_end(png, nullptr);
  return true;
}

absl::Status DecodePng(absl::string_view bytes, int64_t height, int64_t width, int64_t channels,
                       std::vector<uint8_t>* out) {
  PngState st{reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), 0, {0}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &st, PngError, PngWarning);
  if (png == nullptr) return absl::ResourceExhaustedError("libpng: cannot create a reader");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return absl::ResourceExhaustedError("libpng: cannot create a reader");
  }
  std::vector<png_bytep> rows;
  char mismatch[200] = {0};
  const bool ok = DecodePngRaw(&st, png, info, height, width, channels, out, &rows, mismatch, sizeof(mismatch));
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) {
    out->clear();
    return absl::InvalidArgumentError(absl::StrCat("is a corrupt PNG (libpng: ", st.error, ")"));
  }
  if (mismatch[0] != 0) {
    out->clear();
    return absl::InvalidArgumentError(mismatch);
  }
  return absl::OkStatus();
}

// ---- JPEG

struct JpegError {
  jpeg_error_mgr mgr;  // first: libjpeg hands us a jpeg_error_mgr*
  jmp_buf jump;
  char error[JMSG_LENGTH_MAX];
};

void JpegErrorExit(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->error);
  std::longjmp(e->jump, 1);
}

// Corrupt scan data (a truncated image, a bad entropy code) is only a
// warning to libjpeg, which fills the rest with gray: refused here as an
// error, as TensorFlow's decode_jpeg refuses a truncated image. Other
// warnings (an unknown JFIF revision, a bad ICC marker) and trace messages
// are dropped: the pixels are whole.
void JpegEmitMessage(j_common_ptr cinfo, int level) {
  if (level >= 0) return;
  switch (cinfo->err->msg_code) {
    case JWRN_JPEG_EOF:
    case JWRN_HIT_MARKER:
    case JWRN_HUFF_BAD_CODE:
    case JWRN_ARITH_BAD_CODE:
    case JWRN_MUST_RESYNC:
    case JWRN_EXTRANEOUS_DATA:
      JpegErrorExit(cinfo);
      break;
    default:
      break;
  }
}

bool DecodeJpegRaw(jpeg_decompress_struct* cinfo, JpegError* err, absl::string_view bytes, int64_t height,
                   int64_t width, int64_t channels, std::vector<uint8_t>* out, char* mismatch,
                   size_t mismatch_size) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  // libjpeg's working memory for one image of the expected size: far less.
  cinfo->mem->max_memory_to_use = 64L << 20;
  jpeg_mem_src(cinfo, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(cinfo, TRUE);
  const int64_t h = cinfo->image_height;
  const int64_t w = cinfo->image_width;
  const int64_t c = cinfo->num_components;
  if (h != height || w != width || c != channels || (c != 1 && c != 3)) {
    std::snprintf(mismatch, mismatch_size, "is a %s JPEG (height x width x channels), its shape needs %s",
                  Dims(h, w, c).c_str(), Dims(height, width, channels).c_str());
    return true;
  }
  cinfo->out_color_space = c == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(cinfo);
  if (cinfo->output_height != height || cinfo->output_width != width || cinfo->output_components != channels) {
    std::snprintf(mismatch, mismatch_size, "is a JPEG that decodes to %s, its shape needs %s",
                  Dims(cinfo->output_height, cinfo->output_width, cinfo->output_components).c_str(),
                  Dims(height, width, channels).c_str());
    return true;
  }
  out->resize(static_cast<size_t>(h * w * c));
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out->data() + static_cast<size_t>(cinfo->output_scanline) * w * c;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

absl::Status DecodeJpeg(absl::string_view bytes, int64_t height, int64_t width, int64_t channels,
                        std::vector<uint8_t>* out) {
  jpeg_decompress_struct cinfo;
  JpegError err;
  std::memset(&cinfo, 0, sizeof(cinfo));
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = JpegErrorExit;
  err.mgr.emit_message = JpegEmitMessage;
  err.error[0] = 0;
  char mismatch[200] = {0};
  const bool ok = DecodeJpegRaw(&cinfo, &err, bytes, height, width, channels, out, mismatch, sizeof(mismatch));
  jpeg_destroy_decompress(&cinfo);
  if (!ok) {
    out->clear();
    return absl::InvalidArgumentError(absl::StrCat("is a corrupt JPEG (libjpeg: ", err.error, ")"));
  }
  if (mismatch[0] != 0) {
    out->clear();
    return absl::InvalidArgumentError(mismatch);
  }
  return absl::OkStatus();
}

}  // namespace

ImageKind SniffImage(absl::string_view bytes) {
  if (bytes.size() >= sizeof(kPngMagic) && std::memcmp(bytes.data(), kPngMagic, sizeof(kPngMagic)) == 0) {
    return ImageKind::kPng;
  }
  if (bytes.size() >= 3 && static_cast<unsigned char>(bytes[0]) == 0xff &&
      static_cast<unsigned char>(bytes[1]) == 0xd8 && static_cast<unsigned char>(bytes[2]) == 0xff) {
    return ImageKind::kJpeg;
  }
  return ImageKind::kNone;
}

const char* ImageKindName(ImageKind kind) {
  switch (kind) {
    case ImageKind::kPng: return "PNG";
    case ImageKind::kJpeg: return "JPEG";
    default: return "unknown";
  }
}

absl::Status DecodeImage(absl::string_view bytes, int64_t height, int64_t width, int64_t channels,
                         std::vector<uint8_t>* out) {
  if (height < 1 || width < 1 || channels < 1 || height > (1 << 30) / width / channels) {
    return absl::InvalidArgumentError(absl::StrCat("the shape ", Dims(height, width, channels), " is not an image"));
  }
  switch (SniffImage(bytes)) {
    case ImageKind::kPng: return DecodePng(bytes, height, width, channels, out);
    case ImageKind::kJpeg: return DecodeJpeg(bytes, height, width, channels, out);
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("is neither a PNG nor a JPEG image (", bytes.size(), " bytes, no PNG or JPEG signature)"));
  }
}

}  // namespace psrt
