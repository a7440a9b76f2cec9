"""Types shared by the typed-message unit tests."""

from __future__ import annotations

import dataclasses
from typing import Literal, TypedDict

import msgspec
import pydantic


@dataclasses.dataclass
class Order:
    id: int
    item: str = "book"
    tags: list[str] = dataclasses.field(default_factory=list)


class Payment(pydantic.BaseModel):
    id: int
    amount: float


class Cat(pydantic.BaseModel):
    kind: Literal["cat"] = "cat"
    lives: int


class Dog(pydantic.BaseModel):
    kind: Literal["dog"] = "dog"
    good: bool


class Point(msgspec.Struct):
    x: int
    y: int


class Circle(msgspec.Struct, tag=True):
    radius: float


class Square(msgspec.Struct, tag=True):
    side: float


class Row(TypedDict):
    id: int
    name: str
