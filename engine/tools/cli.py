"""The `kafkalog` command (also `python -m engine`): Kafka's tools over a log directory.

Subcommands: demo, dump-log, topics, console-producer, console-consumer, get-offsets, delete-records,
transactions, groups, share-groups, compact, verify, recover, health, mirror, handoff, serve. Every one takes the log directory as
`--data DIR` (default ./data; verify and recover also take it as their positional argument), prints human text or,
with `--json`, JSON, and reports an error as one line on stderr: exit status 2 for bad arguments or values, 1 for
anything else that failed.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

import engine
from engine.common import errors
from engine.tools import admin, compact, console, demo, groups, handoff, mirror_cmd, serve, share_groups, verify
from engine.tools.output import Output

# errors that mean the command line asked for something invalid (exit status 2, as argparse's own)
BAD_INPUT = (errors.InvalidConfigurationError, errors.InvalidPartitionsError, errors.InvalidReplicationFactorError,
             errors.InvalidTopicError, errors.UnsupportedVersionError, errors.InvalidRequiredAcksError)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, not argparse's usage block
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _dump_log(args: argparse.Namespace, out: Output) -> int:
    from engine.tools import dump_log

    return dump_log.dump([f for f in args.files.split(",") if f], as_json=out.as_json, deep=args.deep_iteration,
                         print_data=args.print_data_log, verify_index_only=args.verify_index_only,
                         index_sanity_check=args.index_sanity_check, base_offset=args.base_offset,
                         transaction_log_decoder=args.transaction_log_decoder)


def _add_dump_log(sub) -> None:
    dump = sub.add_parser("dump-log", help="print segment, index and snapshot files as kafka-dump-log does")
    dump.add_argument("--files", required=True, help="comma-separated files (.log, .index, .timeindex, ...)")
    dump.add_argument("--deep-iteration", action="store_true", help="print every record")
    dump.add_argument("--print-data-log", action="store_true", help="print keys and payloads (implies deep)")
    dump.add_argument("--verify-index-only", action="store_true", help="check index entries against the log")
    dump.add_argument("--index-sanity-check", action="store_true", help="run Kafka's index sanity checks")
    dump.add_argument("--base-offset", type=int, help="base offset for a file not named by its offset")
    dump.add_argument("--transaction-log-decoder", action="store_true",
                      help="decode __transaction_state records (implies --print-data-log)")
    dump.set_defaults(func=_dump_log)


def parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data", default="./data", help="the log directory (default ./data)")
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    root = _Parser(prog="kafkalog", description=engine.__doc__.splitlines()[0])
    root.add_argument("--version", action="version", version=f"kafkalog {engine.__version__} ({engine.IMPL})")
    sub = root.add_subparsers(dest="command", required=True, parser_class=_Parser)
    original = sub.add_parser

    def add_parser(name, **kwargs):
        return original(name, parents=[common], **kwargs)
    sub.add_parser = add_parser
    for add in (demo.add_demo, _add_dump_log, admin.add_topics, console.add_producer, console.add_consumer,
                admin.add_get_offsets, admin.add_delete_records, admin.add_transactions, groups.add_groups,
                share_groups.add_share_groups,
                compact.add_compact, verify.add_verify, verify.add_recover, admin.add_health,
                mirror_cmd.add_mirror, handoff.add_handoff, serve.add_serve):
        add(sub)
    return root


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args, Output(args.json))
    except BAD_INPUT as exc:
        print(f"kafkalog {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except errors.KafkaError as exc:
        print(f"kafkalog {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (`kafkalog dump-log ... | head`): stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
