"""wrk's Lua for ``POST /predict`` bodies that never repeat: every request a new digits image.

A response cache sees each one once, so a run measures what a miss costs (``loadtest.bench
http_cpu --body predict-new``). The script writes each 1x8x8 image itself, from a serial: its
first eight pixels are the serial's digits in base 17 (the pixel values 0..16), the rest a fixed
pattern, so 17**8 (~7e9) requests go by before one repeats. Each script starts its serial
at its own ``first``: runs against the same server (warm-up, rounds) never repeat each other's
images either, as long as each sends fewer than ``SERIALS_APART`` requests.
"""

from __future__ import annotations

import itertools

SERIALS_APART = 10_000_000
"""Serials between two scripts' first requests: more than any run sends."""
NEW_IMAGES = """
local sent = {first}
request = function()
  sent = sent + 1
  local serial, pixels = sent, {{}}
  for i = 1, 64 do
    if i <= 8 then
      pixels[i] = serial % 17
      serial = math.floor(serial / 17)
    else
      pixels[i] = i % 17
    end
  end
  local rows = {{}}
  for row = 0, 7 do rows[row + 1] = "[" .. table.concat(pixels, ",", row * 8 + 1, row * 8 + 8) .. "]" end
  return wrk.format(nil, nil, nil, '{{"inputs":[[' .. table.concat(rows, ",") .. ']]}}')
end
"""
_firsts = itertools.count(0, SERIALS_APART)


def new_images_lua() -> str:
    """A ``request`` function for a wrk script (after ``wrk.method``, the path and the JSON
    content type are set): a new image each request, from a serial no earlier script used."""
    return NEW_IMAGES.format(first=next(_firsts))
