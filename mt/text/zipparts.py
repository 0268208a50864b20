"""The zip container of .docx, .odt, .pptx, .odp and .epub, read within bounds and written back
member for member.

`read_zip` refuses before decompressing anything: a file that is not a zip (or is cut short), more
members than `DocumentLimits.max_members`, or declared uncompressed sizes over
`max_unzipped_bytes` (zipfile never inflates a member past its declared size, so the declaration
bounds the work: a zip bomb is refused, not unpacked). A member that fails its CRC or does not
inflate is a `DocumentError` too. `write_zip` keeps every member's name, order, date and
compression (ODF needs its `mimetype` first and stored), replacing only the parts given.
`parse_xml` reads a part with entities and DTDs off (no billion laughs, no external fetches).
"""

from __future__ import annotations

import io
import zipfile
import zlib

from lxml import etree

from mt.text.limits import DocumentError, DocumentLimits


def read_zip(data: bytes, what: str, limits: DocumentLimits) -> dict[str, bytes]:
    """Every member's bytes by name, in the archive's order (see the module docstring for the checks)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as e:
        raise DocumentError(f"not a readable {what} file "
                            f"(its zip container is damaged or missing: {e})") from None
    if len(infos) > limits.max_members:
        raise DocumentError(f"{what}: {len(infos)} files inside the zip; at most {limits.max_members}")
    unzipped = sum(info.file_size for info in infos)
    if unzipped > limits.max_unzipped_bytes:
        raise DocumentError(f"{what}: {unzipped} bytes once unzipped; at most {limits.max_unzipped_bytes}")
    members: dict[str, bytes] = {}
    for info in infos:
        try:
            members[info.filename] = archive.read(info)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, ValueError, OSError) as e:
            raise DocumentError(f"{what}: damaged zip member {info.filename!r} ({e})") from None
    return members


def write_zip(original: bytes, replaced: dict[str, bytes], first: str | None = None) -> bytes:
    """The archive `original` with the members named in `replaced` given new bytes, all else as it
    was; `first` (EPUB's `mimetype`), when there, is made the first member, stored, without extra
    fields, as OCF requires (moved only when it was not so already)."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(original)) as source, zipfile.ZipFile(out, "w") as target:
        infos = source.infolist()
        lead = next((info for info in infos if info.filename == first), None)
        if lead is not None and (lead is not infos[0] or lead.compress_type != zipfile.ZIP_STORED
                                 or lead.extra):
            infos.remove(lead)
            target.writestr(zipfile.ZipInfo(lead.filename, lead.date_time), source.read(lead),
                            zipfile.ZIP_STORED)
        for info in infos:
            target.writestr(info, replaced[info.filename] if info.filename in replaced else source.read(info))
    return out.getvalue()


_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False)


def parse_xml(data: bytes, what: str) -> etree._Element:
    """An XML part's root element; a DocumentError naming `what` when it is not well-formed XML."""
    try:
        return etree.fromstring(data, parser=_PARSER)
    except etree.XMLSyntaxError as e:
        raise DocumentError(f"{what}: not well-formed XML ({e})") from None


def xml_bytes(root: etree._Element) -> bytes:
    """A part's XML as UTF-8 bytes with a declaration, as Word and LibreOffice write it."""
    return etree.tostring(root, xml_declaration=True, encoding="UTF-8", standalone=True)
