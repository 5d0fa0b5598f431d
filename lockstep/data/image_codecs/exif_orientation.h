#pragma once
// The EXIF orientation tag (0x0112) and the transposition it asks for, as PIL's
// ImageOps.exif_transpose applies it. Pure functions; any bytes are safe input.
#include <cstddef>
#include <cstdint>

#include "lockstep/data/transforms/image.h"

namespace lockstep::data {

/// The orientation (1..8) in a TIFF-structured EXIF block (starting "II*\0" or "MM\0*"), or 1
/// (as stored) when the block has no valid tag.
int tiffOrientation(const uint8_t* tiff, size_t size);
/// The orientation in a JPEG's first APP1 "Exif" segment, or 1 when it has none.
int jpegExifOrientation(const uint8_t* jpeg, size_t size);
/// The image as displayed: orientation 2 mirrors, 3 rotates 180 degrees, 4 flips, 5 transposes,
/// 6 rotates 90 degrees clockwise, 7 transverses, 8 rotates 90 degrees counter-clockwise (PIL's
/// FLIP_LEFT_RIGHT, ROTATE_180, FLIP_TOP_BOTTOM, TRANSPOSE, ROTATE_270, TRANSVERSE, ROTATE_90).
/// 1 and unknown values return the image unchanged.
Image applyExifOrientation(Image image, int orientation);

}  // namespace lockstep::data
