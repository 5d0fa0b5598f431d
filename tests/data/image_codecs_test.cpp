// The image decoders (data/image_codecs/): JPEG and PNG to 8-bit RGB as PIL converts them, EXIF
// orientation, DCT-domain scaling, and errors that name the file.
#include <gtest/gtest.h>
#include <png.h>
#include <turbojpeg.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>

#include "data_test_util.h"
#include "lockstep/data/file_bytes.h"
#include "lockstep/data/image_codecs/exif_orientation.h"
#include "lockstep/data/image_codecs/image_file.h"
#include "lockstep/data/image_codecs/jpeg_codec.h"
#include "lockstep/data/image_codecs/png_codec.h"
#include "lockstep/util/error.h"

namespace lockstep::data {
namespace {

using testing::TempDir;
using testing::throwsWith;

// A smooth colour gradient: JPEG keeps it within a few units.
Image gradient(int64_t h, int64_t w, int64_t channels) {
  Image im = Image::zeros(h, w, channels);
  for (int64_t y = 0; y < h; ++y)
    for (int64_t x = 0; x < w; ++x)
      for (int64_t c = 0; c < channels; ++c)
        im.at(y, x, c) = static_cast<uint8_t>(x * 120 / std::max<int64_t>(1, w - 1) +
                                              y * 60 / std::max<int64_t>(1, h - 1) + c * 30);
  return im;
}

int maxDifference(const Image& a, const Image& b) {
  EXPECT_EQ(a.data.size(), b.data.size());
  int d = 0;
  for (size_t i = 0; i < std::min(a.data.size(), b.data.size()); ++i)
    d = std::max(d, std::abs(a.data[i] - b.data[i]));
  return d;
}

// A JPEG with an APP1 EXIF segment (IFD0 holding only the orientation) right after SOI.
std::vector<uint8_t> withExifOrientation(const std::vector<uint8_t>& jpeg, int orientation, bool big_endian) {
  std::vector<uint8_t> tiff = big_endian ? std::vector<uint8_t>{'M', 'M', 0, 42, 0, 0, 0, 8}
                                         : std::vector<uint8_t>{'I', 'I', 42, 0, 8, 0, 0, 0};
  auto u16 = [&](int v) {
    if (big_endian) {
      tiff.push_back(static_cast<uint8_t>(v >> 8)), tiff.push_back(static_cast<uint8_t>(v));
    } else {
      tiff.push_back(static_cast<uint8_t>(v)), tiff.push_back(static_cast<uint8_t>(v >> 8));
    }
  };
  u16(1);                               // one entry
  u16(0x0112), u16(3), u16(0), u16(1);  // orientation, SHORT, count 1 (as two u16: 0, 1 big-endian)
  if (!big_endian) tiff.resize(tiff.size() - 4), u16(1), u16(0);  // count 1 little-endian
  u16(orientation), u16(0);
  tiff.insert(tiff.end(), {0, 0, 0, 0});  // no next IFD
  std::vector<uint8_t> seg = {'E', 'x', 'i', 'f', 0, 0};
  seg.insert(seg.end(), tiff.begin(), tiff.end());
  const size_t len = seg.size() + 2;
  std::vector<uint8_t> out = {
      0xFF, 0xD8, 0xFF, 0xE1, static_cast<uint8_t>(len >> 8), static_cast<uint8_t>(len)};
  out.insert(out.end(), seg.begin(), seg.end());
  out.insert(out.end(), jpeg.begin() + 2, jpeg.end());
  return out;
}

TEST(JpegCodec, decodes_rgb_to_the_encoded_size_within_a_few_units) {
  const Image src = gradient(37, 53, 3);
  const std::vector<uint8_t> jpeg = encodeJpeg(src, 100);
  ASSERT_TRUE(isJpeg(jpeg.data(), jpeg.size()));
  const Image out = decodeJpeg(jpeg.data(), jpeg.size(), "g.jpg");
  EXPECT_EQ(out.height, 37);
  EXPECT_EQ(out.width, 53);
  EXPECT_EQ(out.channels, 3);
  EXPECT_LE(maxDifference(src, out), 12);
}

TEST(JpegCodec, grey_jpeg_becomes_rgb_with_equal_channels) {
  const Image src = gradient(16, 24, 1);
  const std::vector<uint8_t> jpeg = encodeJpeg(src, 95);
  const Image out = decodeImage(jpeg.data(), jpeg.size(), "grey.jpg");
  ASSERT_EQ(out.channels, 3);
  for (int64_t y = 0; y < out.height; ++y)
    for (int64_t x = 0; x < out.width; ++x) {
      EXPECT_EQ(out.at(y, x, 0), out.at(y, x, 1));
      EXPECT_EQ(out.at(y, x, 0), out.at(y, x, 2));
      EXPECT_LE(std::abs(out.at(y, x, 0) - src.at(y, x, 0)), 6);
    }
}

TEST(JpegCodec, one_pixel_images_decode) {
  Image px = Image::zeros(1, 1, 3);
  px.data = {200, 30, 90};
  const std::vector<uint8_t> jpeg = encodeJpeg(px, 100);
  const Image out = decodeImage(jpeg.data(), jpeg.size(), "one.jpg");
  EXPECT_EQ(out.height, 1);
  EXPECT_EQ(out.width, 1);
  const std::vector<uint8_t> png = encodePng(px);
  EXPECT_EQ(decodeImage(png.data(), png.size(), "one.png").data, px.data);
}

TEST(JpegCodec, dct_scaling_keeps_the_shorter_side_at_least_the_minimum) {
  const std::vector<uint8_t> jpeg = encodeJpeg(gradient(48, 64, 3));
  DecodeOptions o;
  for (auto [min_side, h, w] : {std::tuple{0, 48, 64},
                                {48, 48, 64},
                                {24, 24, 32},
                                {13, 24, 32},
                                {12, 12, 16},
                                {1, 6, 8},
                                {100, 48, 64}}) {
    o.min_short_side = min_side;
    const Image out = decodeJpeg(jpeg.data(), jpeg.size(), "s.jpg", o);
    EXPECT_EQ(out.height, h) << "min_short_side " << min_side;
    EXPECT_EQ(out.width, w) << "min_short_side " << min_side;
  }
}

TEST(JpegCodec, truncated_and_garbage_files_are_errors_naming_the_file) {
  const std::vector<uint8_t> jpeg = encodeJpeg(gradient(64, 64, 3), 90);
  const std::vector<uint8_t> cut(jpeg.begin(), jpeg.end() - 10);  // into the scan
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeImage(cut.data(), cut.size(), "dir/cut.jpg"); },
                                  {"dir/cut.jpg", "truncated", "Premature end"}));
  const std::vector<uint8_t> header_only(jpeg.begin(), jpeg.begin() + 20);
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeImage(header_only.data(), header_only.size(), "h.jpg"); },
                                  {"h.jpg", "JPEG"}));
  const std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o'};
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeImage(text.data(), text.size(), "notes.jpg"); },
                                  {"notes.jpg", "neither JPEG nor PNG"}));
  const std::vector<uint8_t> bmp = {'B', 'M', 0, 0, 0, 0};
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeImage(bmp.data(), bmp.size(), "a.bmp"); },
                                  {"a.bmp", "BMP", "not supported"}));
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeImage(nullptr, 0, "empty.png"); }, {"empty.png", "empty"}));
}

TEST(JpegCodec, a_failed_decode_leaves_the_thread_able_to_decode_the_next_file) {
  const std::vector<uint8_t> good = encodeJpeg(gradient(8, 8, 3));
  const std::vector<uint8_t> bad = {0xFF, 0xD8, 0xFF, ' ', 'n', 'o', 't', ' ', 'J', 'P', 'E', 'G'};
  const std::vector<uint8_t> cut(good.begin(), good.end() - 4);
  for (const std::vector<uint8_t>* broken : {&bad, &cut}) {
    EXPECT_THROW(decodeJpeg(broken->data(), broken->size(), "bad.jpg"), IoError);
    EXPECT_EQ(decodeJpeg(good.data(), good.size(), "good.jpg").height, 8);
  }
}

TEST(JpegCodec, oversized_header_is_refused_before_decoding) {
  const std::vector<uint8_t> jpeg = encodeJpeg(gradient(40, 40, 3));
  DecodeOptions o;
  o.max_pixels = 1000;
  EXPECT_TRUE(throwsWith<IoError>([&] { decodeJpeg(jpeg.data(), jpeg.size(), "big.jpg", o); },
                                  {"big.jpg", "40x40", "limit"}));
}

TEST(ExifOrientation, every_orientation_is_pil_exif_transpose) {
  // A 2x3 image whose pixels are their own source index: the result names where each came from.
  Image im = Image::zeros(2, 3, 1);
  for (int i = 0; i < 6; ++i) im.data[static_cast<size_t>(i)] = static_cast<uint8_t>(i);
  // PIL: Image.frombytes("L", (3, 2), bytes(range(6))), then exif_transpose per orientation.
  const std::vector<std::pair<int, std::vector<uint8_t>>> expected = {
      {1, {0, 1, 2, 3, 4, 5}}, {2, {2, 1, 0, 5, 4, 3}}, {3, {5, 4, 3, 2, 1, 0}}, {4, {3, 4, 5, 0, 1, 2}},
      {5, {0, 3, 1, 4, 2, 5}}, {6, {3, 0, 4, 1, 5, 2}}, {7, {5, 2, 4, 1, 3, 0}}, {8, {2, 5, 1, 4, 0, 3}}};
  for (const auto& [o, want] : expected) {
    const Image out = applyExifOrientation(im, o);
    EXPECT_EQ(out.data, want) << "orientation " << o;
    EXPECT_EQ(out.height, o >= 5 ? 3 : 2) << "orientation " << o;
  }
}

TEST(ExifOrientation, jpeg_app1_tag_is_applied_only_when_asked) {
  const std::vector<uint8_t> plain = encodeJpeg(gradient(16, 32, 3), 95);
  for (bool big_endian : {false, true}) {
    const std::vector<uint8_t> jpeg = withExifOrientation(plain, 6, big_endian);
    EXPECT_EQ(jpegExifOrientation(jpeg.data(), jpeg.size()), 6);
    const Image as_stored = decodeJpeg(jpeg.data(), jpeg.size(), "e.jpg");  // torchvision's default
    EXPECT_EQ(as_stored.height, 16);
    DecodeOptions o;
    o.exif_transpose = true;
    const Image shown = decodeJpeg(jpeg.data(), jpeg.size(), "e.jpg", o);
    EXPECT_EQ(shown.height, 32);
    EXPECT_EQ(shown.width, 16);
    EXPECT_EQ(shown.data, applyExifOrientation(as_stored, 6).data);
  }
  EXPECT_EQ(jpegExifOrientation(plain.data(), plain.size()), 1);
}

TEST(ExifOrientation, malformed_blocks_read_as_orientation_1) {
  const std::vector<uint8_t> short_block = {'I', 'I', 42, 0, 200, 0, 0, 0};
  EXPECT_EQ(tiffOrientation(short_block.data(), short_block.size()), 1);
  const std::vector<uint8_t> bad_magic = {'I', 'I', 43, 0, 8, 0, 0, 0, 0, 0};
  EXPECT_EQ(tiffOrientation(bad_magic.data(), bad_magic.size()), 1);
  EXPECT_EQ(tiffOrientation(nullptr, 0), 1);
}

TEST(PngCodec, alpha_is_dropped_not_composited) {
  Image rgba = Image::zeros(3, 2, 4);
  for (size_t i = 0; i < rgba.data.size(); ++i) rgba.data[i] = static_cast<uint8_t>(i * 37);
  const std::vector<uint8_t> png = encodePng(rgba);
  const Image out = decodeImage(png.data(), png.size(), "a.png");
  ASSERT_EQ(out.channels, 3);
  for (int64_t y = 0; y < 3; ++y)
    for (int64_t x = 0; x < 2; ++x)
      for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(out.at(y, x, c), rgba.at(y, x, c));
}

TEST(PngCodec, grey_and_grey_alpha_are_replicated) {
  for (int64_t channels : {1, 2}) {
    Image src = gradient(5, 7, channels);
    const std::vector<uint8_t> png = encodePng(src);
    const Image out = decodePng(png.data(), png.size(), "g.png");
    for (int64_t y = 0; y < 5; ++y)
      for (int64_t x = 0; x < 7; ++x)
        for (int64_t c = 0; c < 3; ++c) EXPECT_EQ(out.at(y, x, c), src.at(y, x, 0));
  }
}

// A PNG written through libpng directly (encodePng writes 8-bit RGB only): its header, what
// `describe` adds to it (a palette), then its rows as libpng takes them.
std::vector<uint8_t> writePng(uint32_t w, uint32_t h, int depth, int color,
                              const std::function<void(png_structp, png_infop)>& describe,
                              const std::vector<std::vector<uint8_t>>& rows) {
  TempDir dir;
  const std::string path = dir.file("x.png");
  FILE* f = std::fopen(path.c_str(), "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, depth, color, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (describe) describe(png, info);
  png_write_info(png, info);
  for (const auto& row : rows) png_write_row(png, row.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
  return readFileBytes(path);
}

// A 16-bit RGB PNG: each sample big-endian.
std::vector<uint8_t> png16(const std::vector<uint16_t>& rgb, uint32_t w, uint32_t h) {
  std::vector<std::vector<uint8_t>> rows(h, std::vector<uint8_t>(w * 6));
  for (uint32_t y = 0; y < h; ++y) {
    for (uint32_t i = 0; i < w * 3; ++i) {
      rows[y][2 * i] = static_cast<uint8_t>(rgb[y * w * 3 + i] >> 8);
      rows[y][2 * i + 1] = static_cast<uint8_t>(rgb[y * w * 3 + i]);
    }
  }
  return writePng(w, h, 16, PNG_COLOR_TYPE_RGB, nullptr, rows);
}

TEST(PngCodec, sixteen_bit_samples_keep_their_high_byte) {
  const std::vector<uint16_t> rgb = {0x0000, 0x00FF, 0x0100, 0x7FFF, 0x8000, 0xFFFF};
  const std::vector<uint8_t> png = png16(rgb, 2, 1);
  const Image out = decodePng(png.data(), png.size(), "16.png");
  EXPECT_EQ(out.data, (std::vector<uint8_t>{0x00, 0x00, 0x01, 0x7F, 0x80, 0xFF}));
}

// A palette PNG with transparency (PNG-8, tRNS): its palette's colours, the transparency dropped
// as PIL's convert("RGB") drops it (it was refused as an "unsupported PNG layout"). 8 and 4 bits.
TEST(PngCodec, a_palette_with_transparency_decodes_to_its_colours) {
  for (const int depth : {8, 4}) {
    const std::vector<uint8_t> bytes =
        writePng(3, 1, depth, PNG_COLOR_TYPE_PALETTE,
                 [](png_structp png, png_infop info) {
                   png_color palette[3] = {{10, 20, 30}, {200, 100, 50}, {1, 2, 3}};
                   png_set_PLTE(png, info, palette, 3);
                   png_byte alpha[2] = {0, 128};  // entry 0 fully transparent, entry 1 half
                   png_set_tRNS(png, info, alpha, 2, nullptr);
                 },
                 {depth == 8 ? std::vector<uint8_t>{2, 0, 1} : std::vector<uint8_t>{0x20, 0x10}});
    const Image out = decodePng(bytes.data(), bytes.size(), "p.png");
    ASSERT_EQ(out.channels, 3) << depth;
    EXPECT_EQ(out.data, (std::vector<uint8_t>{1, 2, 3, 10, 20, 30, 200, 100, 50})) << depth;
  }
}

TEST(PngCodec, corrupt_and_truncated_files_are_errors_naming_the_file) {
  const std::vector<uint8_t> png = encodePng(gradient(32, 32, 3));
  std::vector<uint8_t> cut(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(png.size() / 2));
  EXPECT_TRUE(
      throwsWith<IoError>([&] { decodeImage(cut.data(), cut.size(), "cut.png"); }, {"cut.png", "truncated"}));
  std::vector<uint8_t> bad = png;
  bad[40] ^= 0xFF;  // inside IDAT: the CRC no longer matches
  EXPECT_TRUE(
      throwsWith<IoError>([&] { decodeImage(bad.data(), bad.size(), "bad.png"); }, {"bad.png", "PNG"}));
}

// A CMYK JPEG as libjpeg-turbo writes one (YCCK with an Adobe marker, inverted samples).
std::vector<uint8_t> cmykJpeg(int w, int h) {
  std::vector<uint8_t> cmyk(static_cast<size_t>(w) * h * 4);
  for (size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<uint8_t>((i * 7 + i / 4 * 3) % 256);
  tjhandle tj = tjInitCompress();
  unsigned char* out = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, cmyk.data(), w, 0, h, TJPF_CMYK, &out, &size, TJSAMP_444, 95, 0), 0);
  std::vector<uint8_t> bytes(out, out + size);
  tjFree(out);
  tjDestroy(tj);
  return bytes;
}

// PIL's pixels for the same files, where python3 with Pillow is installed (Debian: python3-pil).

TEST(ImageFile, decoded_pixels_match_pil_within_one_unit) {
  const std::string py = testing::pythonWith("PIL");
  if (py.empty()) GTEST_SKIP() << "python3 with PIL (Pillow) not installed: apt install python3-pil";
  TempDir dir;
  Image rgba = gradient(9, 11, 4);
  // A grey JPEG, a colour one (4:2:0, odd size), one at quality 60, a CMYK one, a PNG with alpha.
  const std::vector<std::pair<std::string, std::vector<uint8_t>>> files = {
      {"grey.jpg", encodeJpeg(gradient(31, 17, 1), 90)},
      {"colour.jpg", encodeJpeg(gradient(45, 61, 3), 90)},
      {"q60.jpg", encodeJpeg(gradient(64, 48, 3), 60)},
      {"cmyk.jpg", cmykJpeg(13, 7)},
      {"alpha.png", encodePng(rgba)}};
  std::string script = "from PIL import Image\nimport sys\n";
  for (const auto& [name, bytes] : files) {
    writeFileBytes(dir.file(name), bytes);
    script += "open(sys.argv[1] + '/" + name + ".rgb', 'wb').write(Image.open(sys.argv[1] + '/" + name +
              "').convert('RGB').tobytes())\n";
  }
  { std::ofstream(dir.file("pil.py")) << script; }
  ASSERT_EQ(std::system((py + " " + dir.file("pil.py") + " " + dir.str()).c_str()), 0);
  for (const auto& [name, bytes] : files) {
    const Image ours = readImageFile(dir.file(name));
    const std::vector<uint8_t> pil = readFileBytes(dir.file(name + ".rgb"));
    ASSERT_EQ(pil.size(), ours.data.size()) << name;
    int worst = 0;
    for (size_t i = 0; i < pil.size(); ++i) worst = std::max(worst, std::abs(pil[i] - ours.data[i]));
    EXPECT_LE(worst, 1) << name;
  }
}

}  // namespace
}  // namespace lockstep::data
