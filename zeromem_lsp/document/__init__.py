"""Config text -> a positioned tree, read the way hjson (DeepSpeed's loader) reads it.

``parse_document(text)`` never raises: syntax errors, relaxations of strict JSON
(comments, trailing commas, unquoted keys...) and duplicate keys come back as
``Problem`` records with exact ranges. ``LineIndex`` converts offsets to LSP
positions in utf-8 / utf-16 / utf-32. This package knows nothing about DeepSpeed.
"""

from .model import Document, Location, Member, Node, Problem
from .parser import parse_document
from .positions import ENCODINGS, LineIndex

__all__ = ["ENCODINGS", "Document", "LineIndex", "Location", "Member", "Node", "Problem", "parse_document"]
