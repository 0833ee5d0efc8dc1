"""Device names: parse, merge and print ``/job:j/replica:r/task:t/device:TYPE:id``.

A ``DeviceSpec`` is a partial device name; any field may be absent (``None``). Specs merge
field by field, inner over outer (``merge_from``), and a partial spec *matches* every full
device name it does not contradict. Legacy ``/cpu:0`` and ``/gpu:1`` parse too, and an id
of ``*`` means any. Pure data: no knowledge of which devices exist.
"""
from __future__ import annotations

import dataclasses
import functools
import re

_FIELD_RE = re.compile(r"^(job|replica|task|device):(.+)$")
_LEGACY_RE = re.compile(r"^(cpu|gpu|CPU|GPU):(\d+|\*)$")


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A possibly partial device name."""

    job: str | None = None
    replica: int | None = None
    task: int | None = None
    device_type: str | None = None
    device_index: int | None = None

    @classmethod
    def from_string(cls, spec):
        """Parse a device string; an empty string or None is the empty spec.

        Raises:
            ValueError: naming the spec and the part that does not parse.
        """
        if spec is None:
            return cls()
        if isinstance(spec, DeviceSpec):
            return spec
        return _parse(cls, spec)  # specs are few and immutable: each string parsed once

    def _fields(self):
        """The five fields, in order (``dataclasses.astuple`` deep-copies: placement calls
        this per op and candidate device)."""
        return (self.job, self.replica, self.task, self.device_type, self.device_index)

    def merge_from(self, outer):
        """A spec with this spec's fields, falling back to ``outer``'s where this has none."""
        outer = DeviceSpec.from_string(outer)
        return DeviceSpec(*(mine if mine is not None else theirs
                            for mine, theirs in zip(self._fields(), outer._fields())))

    def to_string(self):
        parts = []
        if self.job is not None:
            parts.append(f"/job:{self.job}")
        if self.replica is not None:
            parts.append(f"/replica:{self.replica}")
        if self.task is not None:
            parts.append(f"/task:{self.task}")
        if self.device_type is not None:
            index = "*" if self.device_index is None else self.device_index
            parts.append(f"/device:{self.device_type}:{index}")
        return "".join(parts)

    def is_compatible_with(self, other):
        """True when no field set in both specs differs."""
        other = DeviceSpec.from_string(other)
        return all(a is None or b is None or a == b
                   for a, b in zip(self._fields(), other._fields()))

    @property
    def is_empty(self):
        return all(value is None for value in self._fields())

    def __str__(self):
        return self.to_string()



@functools.lru_cache(maxsize=4096)
def _parse(cls, spec):
    """``DeviceSpec.from_string`` of a string (cached: a DeviceSpec is immutable).

    Raises:
        ValueError: naming the spec and the part that does not parse.
    """
    fields = {}
    for part in spec.strip().split("/"):
        if not part:
            continue
        legacy = _LEGACY_RE.match(part)
        if legacy:
            fields["device_type"] = legacy.group(1).upper()
            fields["device_index"] = None if legacy.group(2) == "*" else int(legacy.group(2))
            continue
        match = _FIELD_RE.match(part)
        if not match:
            raise ValueError(f"Invalid device specification {spec!r}: cannot parse {part!r}; "
                             "expected /job:NAME/replica:N/task:N/device:TYPE:N")
        key, value = match.groups()
        try:
            if key == "job":
                fields["job"] = value
            elif key in ("replica", "task"):
                fields[key] = int(value)
            else:
                dtype, _, index = value.partition(":")
                fields["device_type"] = dtype.upper()
                fields["device_index"] = None if index in ("", "*") else int(index)
        except ValueError:
            raise ValueError(f"Invalid device specification {spec!r}: bad value in "
                             f"{part!r}") from None
    return cls(**fields)


def canonical_name(spec):
    """The canonical string of a device spec (``""`` for the empty spec)."""
    return DeviceSpec.from_string(spec).to_string()


def merge(inner, outer):
    """Merge two spec strings, inner over outer; returns the canonical string."""
    return DeviceSpec.from_string(inner).merge_from(outer).to_string()


def task_of(name):
    """The task of a device name: ``/job:w/replica:0/task:1`` of
    ``/job:w/replica:0/task:1/device:CPU:0`` (the whole name when it names no device, ``""``
    for None). Every split of a device name into its task and device is this one."""
    return (name or "").partition("/device:")[0]


def device_of(name):
    """The device within its task: ``CPU:1`` of ``/job:w/replica:0/task:0/device:CPU:1`` (the
    whole name when it has no ``/device:`` part)."""
    return name.rpartition("/device:")[2]


def device_type_of(name):
    """The device type of a device name: ``GPU`` of ``/job:w/replica:0/task:0/device:GPU:1``."""
    return device_of(name).split(":")[0]


def local_device_name(device_type, index, job="localhost", replica=0, task=0):
    """The full name of a device: ``/job:localhost/replica:0/task:0/device:CPU:0``."""
    return f"/job:{job}/replica:{replica}/task:{task}/device:{device_type}:{index}"
