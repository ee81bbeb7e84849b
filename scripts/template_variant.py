"""Write a copy of template.yaml whose parameter defaults take another choice, so the gate checks that choice too.

checkov resolves ``!Ref`` to a parameter's default and skips a resource whose ``Condition`` is false for the
defaults; the template checks read the expansion, which keeps every conditional resource but answers no ``Fn::If``.
A choice the defaults do not take (``StreamHost=fargate-all``: the ECS service, its ALB and roles) would therefore
pass checkov unseen. scripts/sam_gate.sh runs every step on the template and on the copies named here; the copy
changes only the ``Default:`` lines of the parameters it names. Standard library only (any python3)::

    python3 scripts/template_variant.py template.yaml build/template.fargate-all.yaml fargate-all
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

# A choice's parameters: with StreamHost on, the rules also require an image and a certificate (placeholders here:
# the gate deploys nothing).
STREAM_HOST_ON = {
    "StreamHostImageRepository": "agent-backend-streams",
    "StreamHostImageTag": "gate",
    "StreamHostCertificateArn": "arn:aws:acm:us-east-1:123456789012:certificate/00000000-0000-0000-0000-000000000000",
}
VARIANTS: dict[str, dict[str, str]] = {
    "lambda": {},
    "fargate-follow": {"StreamHost": "fargate-follow", **STREAM_HOST_ON},
    "fargate-all": {"StreamHost": "fargate-all", **STREAM_HOST_ON},
}


def with_defaults(text: str, defaults: dict[str, str]) -> str:
    """``text`` (a SAM template) with the ``Default:`` of each named parameter replaced."""
    parameters_at = text.index("\nParameters:\n")
    end = re.search(r"\n[A-Za-z]+:\n", text[parameters_at + 1 :])
    section_end = parameters_at + 1 + end.start() if end else len(text)
    head, section, tail = text[:parameters_at], text[parameters_at:section_end], text[section_end:]
    for name, value in defaults.items():
        pattern = re.compile(rf"(\n  {re.escape(name)}:\n(?:    .*\n)*?    Default: ).*\n")
        section, count = pattern.subn(lambda m, v=value: m.group(1) + json.dumps(v) + "\n", section, count=1)
        if count != 1:
            raise ValueError(f"parameter {name} with a Default: line is not in the template")
    return head + section + tail


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[2] not in VARIANTS:
        print(f"usage: template_variant.py TEMPLATE OUTPUT {{{'|'.join(VARIANTS)}}}", file=sys.stderr)
        return 2
    source, target, variant = Path(argv[0]), Path(argv[1]), argv[2]
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(with_defaults(source.read_text(encoding="utf-8"), VARIANTS[variant]), encoding="utf-8")
    print(f"{source} with StreamHost {variant} -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
