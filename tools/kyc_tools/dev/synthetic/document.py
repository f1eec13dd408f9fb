"""Synthetic identity documents for tests: TD1 cards and TD3 passport data pages.

Everything is drawn from a seeded `numpy.random.Generator`, so a seed gives the
same identity and the same pixels. A document has a tinted, patterned
background, a header, a portrait (the given photo, else a grey silhouette), a
labelled visual zone in DejaVu Sans and the MRZ in OCR-B at the bottom, one
character every 2.54 mm as Doc 9303 prints it: about 29 px per character and
28 px capitals on a 1000 x 630 card, 25 px and 26 px on a 1250 x 880 page. (A
real TD1 carries its MRZ on the back; here it is on the front, so that one photo
holds both the portrait and the MRZ, as `kyc_ensemble` expects.) `Degradation`
then photographs it: placed on a larger background, turned and skewed, lit
unevenly, blurred, noisy and JPEG-compressed, moderately by default so that OCR
can still read it.

Document numbers and optional data span what ICAO Doc 9303 allows (A-Z, 0-9,
fillers), drawn per issuer kind (:data:`NUMBER_KINDS`): digits only, letters only
where OCR-B shares no shape with a digit (as several issuers do), and any letter,
the look-alikes of a digit (O, I, B, D, S, Z, G, Q) included. Names run from two
letters (a long run of fillers after them) to longer than the line holds (cut).
A TD2 card (2 x 36) is drawn as well as TD1 and TD3.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from datetime import date, timedelta
from pathlib import Path
from typing import Any, Literal

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from kyc.document.mrz import compose_mrz, parse_mrz
from kyc.document.mrz_formats import CHECK_NAMES, DIGITS, FORMATS, format_for, resolved_checks

FONT_DIR_DEJAVU = Path("/usr/share/fonts/truetype/dejavu")
DEJAVU = FONT_DIR_DEJAVU / "DejaVuSans.ttf"
DEJAVU_BOLD = FONT_DIR_DEJAVU / "DejaVuSans-Bold.ttf"
OCR_B = Path("/usr/share/fonts/opentype/ocr-b/OCRB.otf")

DocumentKind = Literal["td1", "td2", "td3"]
MRZ_FORMAT = {"td1": "TD1", "td2": "TD2", "td3": "TD3"}

SURNAMES = ("ERIKSSON", "MUELLER", "ROSSI", "GARCIA LOPEZ", "VAN DER BERG", "DUBOIS",
            "NOWAK", "JANSEN", "SILVA", "O'NEILL", "SMITH-JONES", "KOWALSKI", "LINDQVIST",
            "FERREIRA", "DE LA CRUZ", "BERGER", "MARTIN", "NAGY", "HORVAT", "PETERSEN",
            # short names leave long runs of fillers; long ones are cut to the line
            "LI", "NG", "OE", "WU", "BO", "XU", "DIOP", "SZABO", "QUIROGA", "ZOBOLI",
            "OBIOZOR", "DOBBS", "BOOTH", "IZZO", "VOSSBERG-ODDERSHEDE",
            "WOLFESCHLEGELSTEINHAUSEN BERGERDORFF")
GIVEN_NAMES = {
    "F": ("ANNA", "MARIA", "SOFIA", "ELENA", "CLAIRE", "INGRID", "LUCIA", "EVA", "HANNA", "ZOE",
          "BO", "IDA", "OZGE", "ISOBEL", "DOLORES", "MARIA DEL ROSARIO", "QIU"),
    "M": ("JOHN", "PETER", "LUCAS", "MARCO", "JEAN", "TOMAS", "ERIK", "PAUL", "DAVID", "HUGO",
          "MARCUS", "ANDRES", "OZ", "BOGDAN", "ISIDORO", "ZBIGNIEW", "DIEGO", "GODFREY"),
}
STATES = {"UTO": "UTOPIA", "D": "GERMANY", "NLD": "NETHERLANDS", "FRA": "FRANCE",
          "ITA": "ITALY", "ESP": "SPAIN", "BEL": "BELGIUM", "AUT": "AUSTRIA", "SWE": "SWEDEN",
          "POL": "POLAND", "PRT": "PORTUGAL", "IRL": "IRELAND"}
CITIES = ("ZENITH", "NORTHPORT", "LAKESIDE", "OLDTOWN", "RIVERTON", "HIGHFIELD")
NUMBER_LETTERS = "CFHMNPRVWXY"  # no look-alike of a digit (O, I, B, S, Z, G, D, Q...)
LOOKALIKES = "OIBDSZGQ"  # letters OCR-B draws close to a digit (0 1 8 0 5 2 6 0)
ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
# How issuers number their documents, and how often each is drawn: digits only,
# letters without a digit's look-alike, or any letter (Doc 9303 allows A-Z and 0-9).
NUMBER_KINDS = {"digits": 0.3, "lookalike_free": 0.3, "alphanumeric": 0.4}
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")

INK = (24, 24, 30)
LABEL = (70, 82, 120)


@dataclass(frozen=True)
class Identity:
    surname: str
    given_names: str
    sex: str  # M, F or X
    nationality: str
    issuing_state: str
    document_number: str
    birth_date: date
    expiry_date: date
    optional_data: str = ""
    place_of_birth: str = "ZENITH"

    def mrz_fields(self) -> dict[str, Any]:
        """The fields compose_mrz takes."""
        return {
            "issuing_state": self.issuing_state, "surname": self.surname,
            "given_names": self.given_names, "document_number": self.document_number,
            "nationality": self.nationality, "birth_date": self.birth_date, "sex": self.sex,
            "expiry_date": self.expiry_date, "optional_data": self.optional_data,
        }


@dataclass(frozen=True)
class Degradation:
    """A phone photo of the document; each figure is the most it may be, 0 turns it off.

    Each photo draws its own values from the generator, uniformly between a quarter of
    the figure and the figure (rotation in either direction, each corner skewed its own
    way; JPEG quality between `jpeg_quality` and 95).
    """

    margin: float = 0.12  # background around the document, a fraction of its size
    rotation_deg: float = 3.0
    perspective: float = 0.025  # corner shift, a fraction of the document's size
    illumination: float = 0.3  # depth of the light falloff
    blur_sigma: float = 1.2
    noise_sigma: float = 5.0
    jpeg_quality: int | None = 70
    # Off by default (the held-in photos above are drawn without them):
    glare: float = 0.0  # a specular highlight's peak, a fraction of full white
    low_light: float = 0.0  # exposure lost, a fraction (a dim room)


# Phone photos as harsh as a held-out set the reader missed on (issue 37): stronger blur,
# skew and JPEG damage than the default, a highlight across the page, a dim room.
HARSH = Degradation(rotation_deg=6.0, perspective=0.05, illumination=0.5, blur_sigma=2.0,
                    noise_sigma=8.0, jpeg_quality=40, glare=0.6, low_light=0.5)


@dataclass(frozen=True, eq=False)
class RenderedDocument:
    image: np.ndarray  # RGB uint8
    kind: str
    identity: Identity
    mrz_lines: tuple[str, ...]  # as printed
    fields: dict[str, Any] = field(repr=False)  # as parse_mrz reports the printed MRZ
    corners: np.ndarray = field(repr=False)  # the document's corners in the image, TL TR BR BL

    def jpeg_bytes(self, quality: int = 92) -> bytes:
        ok, data = cv2.imencode(".jpg", cv2.cvtColor(self.image, cv2.COLOR_RGB2BGR),
                                [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError("JPEG encoding failed")
        return data.tobytes()


class MissingFontError(RuntimeError):
    pass


def require_fonts() -> None:
    missing = [str(path) for path in (DEJAVU, DEJAVU_BOLD, OCR_B) if not path.is_file()]
    if missing:
        raise MissingFontError(
            f"fonts missing: {', '.join(missing)}; run `make setup` (it installs the Debian "
            "packages fonts-dejavu-core and fonts-ocr-b)")


# --- identities ------------------------------------------------------------------------------


def random_identity(rng: np.random.Generator, today: date | None = None, *,
                    expired: bool = False) -> Identity:
    """A made-up adult and document: valid for another month to ten years, or, with
    `expired`, expired a day to three years ago."""
    today = today or date.today()
    validity = (int(rng.integers(-3 * 365, 0)) if expired
                else int(rng.integers(30, 10 * 365)))
    sex = str(rng.choice(["M", "F", "X"], p=[0.47, 0.47, 0.06]))
    names = GIVEN_NAMES[sex if sex != "X" else str(rng.choice(["M", "F"]))]
    given = rng.choice(names, size=int(rng.choice([1, 2], p=[0.65, 0.35])), replace=False)
    nationality = str(rng.choice(list(STATES)))
    issuing = nationality if rng.random() < 0.85 else str(rng.choice(list(STATES)))
    return Identity(
        surname=str(rng.choice(SURNAMES)),
        given_names=" ".join(str(name) for name in given),
        sex=sex,
        nationality=nationality,
        issuing_state=issuing,
        document_number=_document_number(rng),
        birth_date=today - timedelta(days=int(rng.integers(18 * 365, 80 * 365))),
        expiry_date=today + timedelta(days=validity),
        optional_data=_optional_data(rng),
        place_of_birth=str(rng.choice(CITIES)),
    )


def _digits(rng: np.random.Generator, count: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, count))


def _letters(rng: np.random.Generator, pool: str, count: int) -> str:
    return "".join(str(rng.choice(list(pool))) for _ in range(count))


def _document_number(rng: np.random.Generator) -> str:
    """Nine characters (one in ten shorter, padded with fillers in the MRZ) of an issuer
    kind of :data:`NUMBER_KINDS`."""
    kind = str(rng.choice(list(NUMBER_KINDS), p=list(NUMBER_KINDS.values())))
    length = 9 if rng.random() < 0.9 else int(rng.integers(6, 9))
    if kind == "digits":
        return _digits(rng, length)
    if kind == "lookalike_free":
        letters = int(rng.integers(1, 3))
        return _letters(rng, NUMBER_LETTERS, letters) + _digits(rng, length - letters)
    pool = ALPHABET + LOOKALIKES * 2 + "0123456789" * 2  # look-alikes often, as on real pages
    return "".join(str(rng.choice(list(pool))) for _ in range(length))


def _optional_data(rng: np.random.Generator) -> str:
    """Empty half the time, else digits or letters and digits (a personal number)."""
    roll = rng.random()
    if roll < 0.5:
        return ""
    count = int(rng.integers(6, 13))
    if roll < 0.75:
        return _digits(rng, count)
    return "".join(str(rng.choice(list(ALPHABET + "0123456789"))) for _ in range(count))


def alter_mrz_digit(lines: list[str],
                    rng: np.random.Generator) -> tuple[list[str], tuple[str, ...]]:
    """A forgery: one digit under a check digit changed, and the checks that must now fail."""
    fmt = format_for(len(lines), len(lines[0]), lines[0][0])
    if fmt is None:
        raise ValueError("not an MRZ")
    checks = resolved_checks(fmt, lines)
    spots = [(i, p) for i, line in enumerate(lines) for p, char in enumerate(line)
             if char in DIGITS and any(check.covers(i, p) for check in checks)]
    line, position = spots[int(rng.integers(len(spots)))]
    old = lines[line][position]
    new = str(rng.choice([d for d in DIGITS if d != old]))
    altered = list(lines)
    altered[line] = altered[line][:position] + new + altered[line][position + 1:]
    failing = {check.name for check in checks if check.covers(line, position)}
    return altered, tuple(name for name in CHECK_NAMES if name in failing)


# --- rendering -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    size: tuple[int, int]  # width, height
    header: tuple[int, int]  # baseline of the state's name and of the title
    photo: tuple[int, int, int, int]  # x0, y0, x1, y1
    fields_x: tuple[int, int]  # the two columns of the visual zone
    fields_top: int
    row: int  # height of one label + value
    mrz_left: int
    mrz_baselines: tuple[int, ...]
    mrz_pitch: float  # px per character
    mrz_cap: int  # capital height in px
    title: str


LAYOUTS: dict[str, Layout] = {
    "td1": Layout((1000, 630), (62, 90), (40, 112, 280, 395), (320, 700), 112, 64,
                  62, (480, 532, 584), 29.2, 28, "IDENTITY CARD"),
    "td3": Layout((1250, 880), (66, 98), (45, 135, 375, 560), (410, 850), 130, 72,
                  66, (770, 832), 25.4, 26, "PASSPORT"),
    "td2": Layout((1240, 874), (66, 98), (45, 135, 375, 560), (410, 850), 130, 72,
                  70, (760, 830), 30.0, 30, "IDENTITY CARD"),
}


def printed_mrz(identity: Identity, kind: DocumentKind) -> list[str]:
    """The MRZ lines a genuine document of ``identity`` prints (optional data cut to
    what the format holds: 7 characters on TD2)."""
    fmt = FORMATS[MRZ_FORMAT[kind]]
    fields = identity.mrz_fields()
    room = next(f.length for f in fmt.fields if f.name == "optional_data")
    fields["optional_data"] = fields["optional_data"][:room]
    return compose_mrz(MRZ_FORMAT[kind], fields)


def render_document(identity: Identity, kind: DocumentKind = "td1",
                    photo: np.ndarray | None = None, degrade: Degradation | None = None,
                    rng: np.random.Generator | None = None, *,
                    mrz_lines: list[str] | None = None,
                    today: date | None = None, printed: bool = True) -> RenderedDocument:
    """The document of `identity` (RGB `photo` in the portrait area), photographed when
    `degrade` is given; `mrz_lines` prints another MRZ (a forgery) instead of its own.
    `today` is for reading the printed MRZ into `fields` (the century of its dates).
    `printed` False leaves out every printed text but the MRZ (the header and the visual
    zone): a forger's page that only an MRZ vouches for."""
    require_fonts()
    rng = rng if rng is not None else np.random.default_rng(0)
    layout = LAYOUTS[kind]
    lines = list(mrz_lines) if mrz_lines is not None else printed_mrz(identity, kind)
    canvas = _background(layout, rng)
    draw = ImageDraw.Draw(canvas)
    if printed:
        _draw_header(draw, layout, identity)
    canvas.paste(Image.fromarray(_portrait(photo, layout)), layout.photo[:2])
    if printed:
        _draw_visual_zone(draw, layout, identity, kind)
    _draw_signature(draw, layout, rng)
    _draw_mrz(draw, layout, lines)
    image = np.asarray(canvas.convert("RGB"))
    width, height = layout.size
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
    if degrade is not None:
        image, corners = photograph(image, degrade, rng)
    fields = parse_mrz(lines, today)["fields"]
    return RenderedDocument(image, kind, identity, tuple(lines), fields, corners)


@functools.lru_cache(maxsize=32)
def _font(path: Path, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(str(path), size)


@functools.lru_cache(maxsize=8)
def _ocr_b(cap_height: int) -> ImageFont.FreeTypeFont:
    """OCR-B at the size whose capitals are `cap_height` px tall."""
    probe = _font(OCR_B, 100)
    top, bottom = probe.getbbox("H")[1], probe.getbbox("H")[3]
    return _font(OCR_B, round(100 * cap_height / (bottom - top)))


def _background(layout: Layout, rng: np.random.Generator) -> Image.Image:
    """A pale tint with a diagonal gradient and guilloche waves above the MRZ."""
    width, height = layout.size
    hue = rng.uniform(0, 1, 3)
    light = np.array([235, 238, 240]) + (hue - 0.5) * 24
    dark = light - rng.uniform(12, 30)
    ys, xs = np.ogrid[0:height, 0:width]
    t = ((xs / width + ys / height) / 2)[..., None].astype(np.float32)
    base = (light * (1 - t) + dark * t).clip(0, 255).astype(np.uint8)
    canvas = Image.fromarray(base)
    draw = ImageDraw.Draw(canvas)
    wave = tuple(int(v) for v in (dark - 18).clip(0, 255))
    limit = layout.mrz_baselines[0] - layout.mrz_cap - 25
    for k in range(14):
        phase, amplitude = rng.uniform(0, 2 * math.pi), rng.uniform(8, 26)
        y0 = 40 + k * (limit - 40) / 14
        points = [(x, y0 + amplitude * math.sin(x / 45 + phase + k)) for x in range(0, width, 6)]
        draw.line(points, fill=wave, width=1)
    draw.rectangle((0, limit + 10, width, height), fill=tuple(int(v) for v in light + 6))
    return canvas


def _draw_header(draw: ImageDraw.ImageDraw, layout: Layout, identity: Identity) -> None:
    width = layout.size[0]
    state = STATES.get(identity.issuing_state, identity.issuing_state)
    draw.text((width // 2, layout.header[0]), state, font=_font(DEJAVU_BOLD, 34), fill=INK,
              anchor="ms")
    draw.text((width // 2, layout.header[1]), layout.title, font=_font(DEJAVU, 20), fill=LABEL,
              anchor="ms")


def _portrait(photo: np.ndarray | None, layout: Layout) -> np.ndarray:
    x0, y0, x1, y1 = layout.photo
    width, height = x1 - x0, y1 - y0
    if photo is None:
        return _silhouette(width, height)
    src_h, src_w = photo.shape[:2]
    scale = max(width / src_w, height / src_h)  # cover the box, crop the rest
    resized = cv2.resize(np.ascontiguousarray(photo[..., :3]),
                         (math.ceil(src_w * scale), math.ceil(src_h * scale)),
                         interpolation=cv2.INTER_AREA)
    top = (resized.shape[0] - height) // 2
    left = (resized.shape[1] - width) // 2
    return np.ascontiguousarray(resized[top:top + height, left:left + width]).astype(np.uint8)


def _silhouette(width: int, height: int) -> np.ndarray:
    image = Image.new("RGB", (width, height), (214, 216, 220))
    draw = ImageDraw.Draw(image)
    cx = width // 2
    draw.ellipse((cx - width * 0.48, height * 0.68, cx + width * 0.48, height * 1.3),
                 fill=(128, 130, 136))
    draw.ellipse((cx - width * 0.22, height * 0.18, cx + width * 0.22, height * 0.62),
                 fill=(150, 152, 158))
    return np.asarray(image)


def _viz_date(day: date) -> str:
    return f"{day.day:02d} {MONTHS[day.month - 1]} {day.year}"


def _visual_rows(identity: Identity, kind: str) -> list[tuple[tuple[str, str], ...]]:
    """Rows of (label, value) pairs, one or two columns."""
    sex = {"M": "M", "F": "F"}.get(identity.sex, "X")
    number_label = "Passport No." if kind == "td3" else "Document No."
    rows: list[tuple[tuple[str, str], ...]] = [
        (("Surname", identity.surname),),
        (("Given names", identity.given_names),),
        (("Nationality", identity.nationality), ("Sex", sex)),
        (("Date of birth", _viz_date(identity.birth_date)), (number_label,
                                                             identity.document_number)),
    ]
    if kind == "td3":
        issued = identity.expiry_date - timedelta(days=3652)
        rows.append((("Place of birth", identity.place_of_birth),
                     ("Date of issue", _viz_date(issued))))
    rows.append((("Date of expiry", _viz_date(identity.expiry_date)),
                 ("Authority", STATES.get(identity.issuing_state, "UTOPIA")[:12])))
    return rows


def _draw_visual_zone(draw: ImageDraw.ImageDraw, layout: Layout, identity: Identity,
                      kind: str) -> None:
    label_font, value_font = _font(DEJAVU, 15), _font(DEJAVU_BOLD, 24)
    for r, row in enumerate(_visual_rows(identity, kind)):
        y = layout.fields_top + r * layout.row
        for (label, value), x in zip(row, layout.fields_x, strict=False):
            draw.text((x, y), label, font=label_font, fill=LABEL)
            draw.text((x, y + 20), value, font=value_font, fill=INK)


def _draw_signature(draw: ImageDraw.ImageDraw, layout: Layout, rng: np.random.Generator) -> None:
    """A scribble under the portrait."""
    x0, _, x1, y1 = layout.photo
    t = np.linspace(0, 1, 60)
    xs = x0 + 20 + t * (x1 - x0 - 40)
    ys = y1 + 22 + 8 * np.sin(t * rng.uniform(10, 18)) * np.cos(t * rng.uniform(3, 6))
    draw.line(list(zip(xs.tolist(), ys.tolist(), strict=True)), fill=(30, 40, 110), width=2)


def _draw_mrz(draw: ImageDraw.ImageDraw, layout: Layout, lines: list[str]) -> None:
    """One character per cell of `mrz_pitch` px, centred, on the MRZ baselines."""
    font = _ocr_b(layout.mrz_cap)
    pitch = layout.mrz_pitch
    for line, baseline in zip(lines, layout.mrz_baselines, strict=True):
        for i, char in enumerate(line):
            x = layout.mrz_left + i * pitch + (pitch - font.getlength(char)) / 2
            draw.text((x, baseline), char, font=font, fill=INK, anchor="ls")


# --- photographing ---------------------------------------------------------------------------


def photograph(document: np.ndarray, degrade: Degradation,
               rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """The document as a phone would photograph it, and where its corners land."""
    height, width = document.shape[:2]
    mx, my = round(width * degrade.margin), round(height * degrade.margin)
    size = (width + 2 * mx, height + 2 * my)
    corners = _placed_corners(width, height, mx, my, degrade, rng)
    source = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float32)
    matrix = cv2.getPerspectiveTransform(source, corners.astype(np.float32))
    warped = cv2.warpPerspective(document.astype(np.float32), matrix, size,
                                 flags=cv2.INTER_LINEAR)
    mask = cv2.warpPerspective(np.ones((height, width), np.float32), matrix, size,
                               flags=cv2.INTER_LINEAR)[..., None]
    image = warped * mask + _table(size, rng) * (1 - mask)
    image *= _light(size, degrade.illumination, rng)[..., None]
    if degrade.low_light:
        image *= 1.0 - _drawn(rng, degrade.low_light)
    if degrade.glare:
        image += _glare(size, degrade.glare, rng)[..., None]
    image = _blur(image, degrade.blur_sigma, rng)
    image += rng.standard_normal(image.shape, dtype=np.float32) * _drawn(rng, degrade.noise_sigma)
    image = image.clip(0, 255).astype(np.uint8)
    return _jpeg(image, degrade.jpeg_quality, rng), corners


def _drawn(rng: np.random.Generator, maximum: float) -> float:
    return maximum * rng.uniform(0.25, 1.0)


def _placed_corners(width: int, height: int, mx: int, my: int, degrade: Degradation,
                    rng: np.random.Generator) -> np.ndarray:
    corners = np.array([[0, 0], [width, 0], [width, height], [0, height]], dtype=np.float64)
    corners += rng.uniform(-1, 1, (4, 2)) * degrade.perspective * np.array([width, height])
    angle = math.radians(_drawn(rng, degrade.rotation_deg) * rng.choice([-1, 1]))
    rotation = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    centre = np.array([width / 2, height / 2])
    return (corners - centre) @ rotation.T + centre + np.array([mx, my])


def _table(size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    """What the document lies on: a darker surface with a soft texture."""
    width, height = size
    colour = rng.uniform(40, 140, 3).astype(np.float32)
    coarse = rng.normal(0, 12, (height // 16 + 1, width // 16 + 1)).astype(np.float32)
    texture = cv2.resize(coarse, size, interpolation=cv2.INTER_CUBIC)
    return colour + texture[..., None]


def _light(size: tuple[int, int], strength: float, rng: np.random.Generator) -> np.ndarray:
    """A multiplicative light field: brightest towards a random side, darker corners."""
    width, height = size
    ys, xs = np.ogrid[0:height, 0:width]
    u = (xs / width - 0.5).astype(np.float32)
    v = (ys / height - 0.5).astype(np.float32)
    direction = rng.uniform(0, 2 * math.pi)
    ramp = u * math.cos(direction) + v * math.sin(direction)  # -0.7 .. 0.7
    depth = _drawn(rng, strength)
    return 1.0 - depth * (0.5 - ramp) * 0.8 - depth * 0.4 * (u * u + v * v)


def _glare(size: tuple[int, int], strength: float, rng: np.random.Generator) -> np.ndarray:
    """An additive highlight: an elongated Gaussian spot somewhere on the photo."""
    width, height = size
    ys, xs = np.ogrid[0:height, 0:width]
    cx, cy = rng.uniform(0.15, 0.85) * width, rng.uniform(0.15, 0.85) * height
    sx, sy = rng.uniform(0.06, 0.2) * width, rng.uniform(0.04, 0.12) * height
    spot = np.exp(-(((xs - cx) / sx) ** 2 + ((ys - cy) / sy) ** 2) / 2).astype(np.float32)
    return 255.0 * _drawn(rng, strength) * spot


def _blur(image: np.ndarray, sigma: float, rng: np.random.Generator) -> np.ndarray:
    drawn = _drawn(rng, sigma)
    return cv2.GaussianBlur(image, (0, 0), drawn) if drawn > 0.05 else image


def _jpeg(image: np.ndarray, quality: int | None, rng: np.random.Generator) -> np.ndarray:
    if quality is None:
        return image
    drawn = int(rng.integers(quality, 96))
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(image, cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, drawn])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return cv2.cvtColor(cv2.imdecode(data, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
