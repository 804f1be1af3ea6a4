"""Image preprocessing on real images made here with Pillow (and a few hand-built PNG headers
for the size attacks): formats, orientation, colour, geometry, normalisation, refusals."""

from __future__ import annotations

import hashlib
import io
import struct

import numpy as np
import pytest
from PIL import Image, ImageCms, ImageFile

from harness.media import bilevel_png, encode_image, noise_image
from workers.preprocess.errors import ImageTooLarge, ImageUnreadable, UnsupportedMedia
from workers.preprocess.images import (
    CLIP_MEAN,
    CLIP_STD,
    ImageLimits,
    decode_image,
    patchify,
    preprocess_image,
    resize_for_model,
    sniff_image_format,
    to_patches,
)
from workers.runtime.tensors import tensor_from_bytes, tensor_to_bytes

LIMITS = ImageLimits()
RED = (255, 0, 0)
BLUE = (0, 0, 255)


def close_to(pixel, expected, tolerance=3) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, expected, strict=True))


@pytest.fixture
def decode_calls(monkeypatch):
    """Counts pixel decodes (ImageFile.load), to prove a refusal happened before any."""
    calls: list[tuple[int, int]] = []
    original = ImageFile.ImageFile.load

    def counting_load(self):
        calls.append(self.size)
        return original(self)

    monkeypatch.setattr(ImageFile.ImageFile, "load", counting_load)
    return calls


# --- formats --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "params"),
    [("PNG", {}), ("JPEG", {"quality": 95}), ("WEBP", {"lossless": True}), ("GIF", {})],
)
def test_each_accepted_format_decodes_to_rgb(fmt, params):
    data = encode_image(Image.new("RGB", (40, 30), RED), fmt, **params)
    assert sniff_image_format(data) == fmt
    img = decode_image(data, LIMITS)
    assert img.mode == "RGB"
    assert img.size == (40, 30)
    assert close_to(img.getpixel((20, 15)), RED)


def test_animated_gif_gives_its_first_frame():
    frames = [Image.new("RGB", (16, 16), RED), Image.new("RGB", (16, 16), BLUE)]
    out = io.BytesIO()
    frames[0].save(out, "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    img = decode_image(out.getvalue(), LIMITS)
    assert close_to(img.getpixel((8, 8)), RED)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b'<?xml version="1.0"?>\n<svg xmlns="http://www.w3.org/2000/svg"/>', "SVG"),
        (b'<svg xmlns="http://www.w3.org/2000/svg" width="10"/>', "SVG"),
        (b"<!DOCTYPE html><html><body>404</body></html>", "HTML"),
        (b"<rss><channel/></rss>", "XML"),
        (b"just some words\n", "text"),
        (b"", "empty"),
        (b"BM" + b"\x00" * 60, "BMP"),
        (b"\x00\x00\x00\x1cftypavif" + b"\x00" * 40, "AVIF"),
        (bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8)), "unrecognised"),
    ],
)
def test_everything_else_is_unsupported_with_a_precise_message(data, says):
    with pytest.raises(UnsupportedMedia, match=says):
        sniff_image_format(data)
    with pytest.raises(UnsupportedMedia):
        decode_image(data, LIMITS)


def test_magic_bytes_decide_not_the_rest():
    # A PNG signature followed by a JPEG is not "some image": only the PNG plugin may parse it.
    jpeg = encode_image(Image.new("RGB", (8, 8), RED), "JPEG")
    with pytest.raises(ImageUnreadable):
        decode_image(b"\x89PNG\r\n\x1a\n" + jpeg, LIMITS)


# --- orientation and colour -----------------------------------------------------------------


def test_exif_orientation_is_applied():
    # Stored 40x20, left half blue; Orientation 6 means "rotate 90 degrees clockwise to view".
    stored = Image.new("RGB", (40, 20), RED)
    stored.paste(BLUE, (0, 0, 20, 20))
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode_image(stored, "JPEG", exif=exif, quality=95)

    img = decode_image(data, LIMITS)
    assert img.size == (20, 40)
    assert close_to(img.getpixel((10, 5)), BLUE)  # the left half is now on top
    assert close_to(img.getpixel((10, 35)), RED)

    processed = preprocess_image(data, LIMITS)
    assert (processed.width, processed.height) == (20, 40)


def test_alpha_is_composited_on_white():
    data = encode_image(Image.new("RGBA", (10, 10), (255, 0, 0, 128)), "PNG")
    assert close_to(decode_image(data, LIMITS).getpixel((5, 5)), (255, 127, 127), 1)


def test_palette_with_transparency_is_composited_on_white():
    img = Image.new("P", (10, 10), 0)
    img.putpalette([255, 0, 0, 0, 0, 255] + [0] * 762)
    img.paste(1, (0, 0, 5, 10))
    data = encode_image(img, "PNG", transparency=1)
    out = decode_image(data, LIMITS)
    assert out.getpixel((2, 5)) == (255, 255, 255)  # the transparent index
    assert out.getpixel((7, 5)) == RED


def test_grayscale_with_alpha_and_bilevel_become_rgb():
    la = decode_image(encode_image(Image.new("LA", (4, 4), (100, 255)), "PNG"), LIMITS)
    assert la.getpixel((1, 1)) == (100, 100, 100)
    bilevel = decode_image(encode_image(Image.new("1", (4, 4), 1), "PNG"), LIMITS)
    assert bilevel.getpixel((1, 1)) == (255, 255, 255)


def test_cmyk_jpeg_becomes_rgb():
    data = encode_image(Image.new("CMYK", (16, 16), (0, 255, 255, 0)), "JPEG", quality=95)
    img = decode_image(data, LIMITS)
    assert img.mode == "RGB"
    assert close_to(img.getpixel((8, 8)), RED, 4)


def test_sixteen_bit_grayscale_is_scaled_not_clipped():
    # Pillow's own I;16 -> L conversion clips at 255: mid-grey would come out white.
    levels = np.array([[0, 4096, 32768, 65535]], dtype=np.uint16)
    data = encode_image(Image.fromarray(levels), "PNG")
    assert Image.open(io.BytesIO(data)).mode.startswith("I;16")
    img = decode_image(data, LIMITS)
    assert [img.getpixel((x, 0)) for x in range(4)] == [
        (0, 0, 0),
        (16, 16, 16),
        (128, 128, 128),
        (255, 255, 255),
    ]


def _srgb_with_red_and_blue_swapped() -> bytes:
    """sRGB's profile with its red and blue primaries exchanged: an image tagged with it and
    stored as pure red really means pure blue, so honouring the profile is visible."""
    icc = bytearray(ImageCms.ImageCmsProfile(ImageCms.createProfile("sRGB")).tobytes())
    (count,) = struct.unpack(">I", icc[128:132])
    entry = {bytes(icc[132 + 12 * i : 136 + 12 * i]): 132 + 12 * i for i in range(count)}
    red, blue = entry[b"rXYZ"], entry[b"bXYZ"]
    icc[red + 4 : red + 12], icc[blue + 4 : blue + 12] = (
        icc[blue + 4 : blue + 12],
        icc[red + 4 : red + 12],
    )
    return bytes(icc)


def test_embedded_icc_profile_is_converted_to_srgb():
    data = encode_image(
        Image.new("RGB", (8, 8), RED), "PNG", icc_profile=_srgb_with_red_and_blue_swapped()
    )
    assert close_to(decode_image(data, LIMITS).getpixel((4, 4)), BLUE, 2)


def test_a_broken_icc_profile_is_ignored():
    data = encode_image(
        Image.new("RGB", (8, 8), (200, 100, 50)), "PNG", icc_profile=b"not icc" * 20
    )
    assert decode_image(data, LIMITS).getpixel((4, 4)) == (200, 100, 50)


# --- geometry and normalisation -------------------------------------------------------------


def test_resize_keeps_aspect_and_pads_with_the_mean_colour():
    pad = LIMITS.pad_colour
    wide = resize_for_model(Image.new("RGB", (200, 100), RED), LIMITS)
    assert wide.size == (336, 336)
    # 200x100 -> 336x168, centred: rows 84..251 are the image, the rest padding.
    assert wide.getpixel((168, 83)) == pad
    assert close_to(wide.getpixel((168, 84)), RED, 1)
    assert close_to(wide.getpixel((168, 251)), RED, 1)
    assert wide.getpixel((168, 252)) == pad
    assert wide.getpixel((0, 168)) != pad  # no padding at the sides

    tall = resize_for_model(Image.new("RGB", (50, 300), BLUE), LIMITS)
    assert tall.getpixel((10, 168)) == pad  # 50x300 -> 56x336, columns 140..195
    assert close_to(tall.getpixel((168, 0)), BLUE, 1)


def test_normalisation_of_a_known_colour():
    img = Image.new("RGB", (28, 28), (255, 0, 128))
    tensor = to_patches(img, LIMITS)
    assert tensor.dtype == np.float32
    assert tensor.shape == (3, 28, 28)
    expected = [
        (v / 255 - m) / s for v, m, s in zip((255, 0, 128), CLIP_MEAN, CLIP_STD, strict=True)
    ]
    np.testing.assert_allclose(tensor[:, 5, 7], expected, rtol=1e-5)
    # e.g. red channel of white: (1 - 0.48145466) / 0.26862954 = 1.9303...
    assert tensor[0, 0, 0] == pytest.approx(1.93034, abs=1e-4)


def test_padding_normalises_to_about_zero():
    tensor = to_patches(resize_for_model(Image.new("RGB", (336, 100), RED), LIMITS), LIMITS)
    assert np.abs(tensor[:, 0, :]).max() < 0.01  # top row is padding


def test_patchify_counts_and_layout():
    tensor = np.arange(3 * 336 * 336, dtype=np.float32).reshape(3, 336, 336)
    patches = patchify(tensor, 14)
    assert patches.shape == (576, 3 * 14 * 14)
    assert (336 // 14) ** 2 == 576 == LIMITS.num_patches
    row, col = 5, 17  # patch index 5 * 24 + 17
    expected = tensor[:, row * 14 : (row + 1) * 14, col * 14 : (col + 1) * 14].reshape(-1)
    np.testing.assert_array_equal(patches[row * 24 + col], expected)
    with pytest.raises(ValueError, match="multiple"):
        patchify(np.zeros((3, 30, 28), np.float32), 14)


def test_preprocess_image_end_to_end():
    data = encode_image(noise_image(1024, 768), "JPEG", quality=90)
    processed = preprocess_image(data, LIMITS)
    assert processed.sha256 == hashlib.sha256(data).hexdigest()
    assert (processed.width, processed.height, processed.format) == (1024, 768, "JPEG")
    assert processed.pixel_values.shape == (3, 336, 336)
    assert processed.pixel_values.dtype == np.float32
    assert processed.num_patches == 576
    assert not processed.pixel_values.flags.writeable
    # The reduced-scale JPEG decode is a speed-up, not a different picture.
    reference = to_patches(resize_for_model(decode_image(data, LIMITS), LIMITS), LIMITS)
    assert np.abs(processed.pixel_values - reference).mean() < 0.1


def test_limits_must_fit_the_patch_grid():
    with pytest.raises(ValueError, match="multiple"):
        ImageLimits(target=300, patch=14)


def test_tensor_round_trip_and_no_pickles():
    tensor = np.random.default_rng(2).standard_normal((3, 336, 336)).astype(np.float32)
    back = tensor_from_bytes(tensor_to_bytes(tensor))
    assert back.dtype == np.float32
    np.testing.assert_array_equal(back, tensor)
    out = io.BytesIO()
    np.save(out, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        tensor_from_bytes(out.getvalue())


# --- refusals -------------------------------------------------------------------------------


def test_over_the_byte_limit_is_refused():
    data = encode_image(noise_image(64, 64), "PNG")
    with pytest.raises(ImageTooLarge, match="bytes"):
        decode_image(data, ImageLimits(max_bytes=len(data) - 1))
    assert decode_image(data, ImageLimits(max_bytes=len(data))).size == (64, 64)


def test_a_real_50_megapixel_png_is_refused_before_decoding(decode_calls):
    data = bilevel_png(8000, 6300)  # valid, ~6 KB, 50.4 MP
    assert len(data) < 100_000
    with pytest.raises(ImageTooLarge, match="50400000 pixels"):
        decode_image(data, LIMITS)
    assert decode_calls == []
    # The counter does see a decode when one happens (load() is re-entered by conversions).
    decode_image(bilevel_png(80, 63), LIMITS)
    assert decode_calls
    assert set(decode_calls) == {(80, 63)}


def test_a_header_only_bomb_is_refused_by_our_check(decode_calls):
    # 36 MP declared: over our 25 MP, under Pillow's own 89 MP, so ours is the check that fires.
    # The IDAT is garbage: had anything been decoded, this would be ImageUnreadable.
    data = bilevel_png(6000, 6000, idat=b"not even zlib")
    with pytest.raises(ImageTooLarge, match="36000000 pixels"):
        decode_image(data, LIMITS)
    assert decode_calls == []


def test_pillows_decompression_bomb_error_becomes_image_too_large(decode_calls):
    # Our limits set absurdly high: Pillow's own check (> 2 x MAX_IMAGE_PIXELS) is what fires.
    lax = ImageLimits(max_pixels=10**12, max_side=10**6)
    data = bilevel_png(100_000, 100_000, idat=b"x")
    with pytest.raises(ImageTooLarge, match="decompression bomb"):
        decode_image(data, lax)
    assert decode_calls == []


def test_a_side_over_the_limit_is_refused():
    data = bilevel_png(20_000, 4)  # 80 kP: the pixel count is fine, the side is not
    with pytest.raises(ImageTooLarge, match="side"):
        decode_image(data, LIMITS)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_truncated_image_is_unreadable(fmt):
    data = encode_image(noise_image(256, 256), fmt)
    with pytest.raises(ImageUnreadable):
        decode_image(data[: len(data) // 2], LIMITS)


def test_header_only_png_is_unreadable():
    with pytest.raises(ImageUnreadable):
        decode_image(b"\x89PNG\r\n\x1a\n" + b"\x00" * 10, LIMITS)


def test_corrupt_pixel_data_is_unreadable():
    with pytest.raises(ImageUnreadable):
        decode_image(bilevel_png(64, 64, idat=b"definitely not a zlib stream"), LIMITS)
