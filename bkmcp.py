#!/usr/bin/env python3
"""bkmcp: a command-line MCP (Model Context Protocol) client in one file.

Connect to MCP servers configured in one ``mcp.json``, check them, discover their tools, read a tool's help and
call a tool with typed arguments, with one JSON envelope on stdout and exit codes scripts can trust
(0 success, 1 local/usage error, 2 remote/runtime error, 130 interrupted).

The module is split into sections by banner comments (``grep -n '^# ====' -A1 bkmcp.py`` prints them), some into
numbered rooms (``grep -n '^# -- [0-9]' bkmcp.py``). Each section uses only the sections above it:

    1. Errors & exit codes      one exception root, every stable error code of docs/contract.md §7
    2. Helpers                  small records, JSON, redaction, durations and deadlines, logging, terminal text,
                                URI templates, the blob writer:
       2.1 records, JSON           a small dataclass, the heap frozen (freeze_heap), JSON with number fidelity (a
                                   duplicate key rejected: parse_json, dump_json), as deep as it parses
                                   (too_deep_words; call_with_headroom: a deep walk on a stack of its own)
       2.2 redaction               secrets scrubbed from every output (Redactor, redact_url)
       2.3 durations, deadlines    --timeout's durations (parse_duration), the default timeout, Deadline
       2.4 logging                 is_terminal, the line writer that never blocks (resident log and events), Log
       2.5 terminal text           server text in a message or on a terminal, the helpers every room uses
                                   (CONTROL, clip_text, printable, short_text, terminal_safe); the progress line,
                                   close spellings, the tool-option tokens the argv parser hands to section 8
       2.6 URI templates           RFC 6570 levels 1-3 expanded locally for --read TEMPLATE --VAR VALUE
                                   (parse_uri_template, expand_uri_template, parse_template_values)
       2.7 blob files              the one writer of --out DIR (and --skill's copy), safe against its server: a
                                   name from the URI and MIME type (build_blob_name), a relative path part by part
                                   (parse_relative_path), O_EXCL | O_NOFOLLOW under the directory's descriptor,
                                   numbered names, 0644 (BlobWriter); --max-blob-bytes: one decoded blob, CLI and
                                   resident alike (MAX_BLOB_BYTES, blob_over_cap: blob_too_large)
    3. Config                   file selection, strict parsing (a duplicate key: section 2's JSON), per-field
                                validation (editor files: an unusable entry is refused only when selected,
                                EDITOR_IGNORED_FIELDS), ${VAR} expansion, build_server_command (with --config)
    4. Auth                     Bearer / X-Bkapi-Authorization forms, conflicts, secrets to scrub; a server resolved
                                for its transport (ResolvedServer), with the environment a stdio child inherits
    5. Protocol core (sans-IO)  JSON-RPC framing, SSE decoder, eras, request building, classification, the session
                                core and negotiation as pure decision steps, in ten rooms:
       5.1 eras                    the protocol versions and what differs between them (EraRules, era_rules)
       5.2 JSON-RPC framing        Message, one line or body -> messages; the envelope of an answer too deep or
                                   too long to parse (parse_rpc_envelope, parse_trailing_id)
       5.3 SSE decoding            SseDecoder: event ids, retry, the last event id for resumption
       5.4 request building        initialize, server/discover, tools/list, tools/call and their _meta; the
                                   Mcp-Method/Mcp-Name headers (tools/call, resources/read, prompts/get)
       5.5 answers                 era evidence, results (a list method's items: LISTINGS), errors classified
       5.6 the session core        ids (random on stdio: random_first_id), pending requests, the one matching
                                   rule, answers that match no request (Stray), era and session state, the
                                   Mcp-Session-Id that initialize issues (ClientSession)
       5.7 negotiation             the modern probe and the legacy fallback as pure decision steps (Negotiation)
       5.8 x-mcp-header            a tool excluded for an invalid x-mcp-header declaration (split_excluded_tools)
       5.9 tasks                   who runs a call as a task (decide_task), the task's shapes in both eras
                                   (parse_created_task, build_task_handle), the poll delay (task_poll_delay)
       5.10 skills (SEP-2640)      a skill's listed files (parse_skill_files), each verified against its digest
                                   and size, SKILL.md's YAML frontmatter against the listing's (verify_skill_file,
                                   parse_frontmatter): skill_unverified
    6. Transports               the Transport seam: HTTP via httpx (concurrent POSTs on one pooled client),
                                stdio framing (a bounded line reader, lines that are not JSON-RPC skipped)
                                apart from child-process supervision, in four rooms:
       6.1 the seam                Transport and Outgoing, whether a request was sent; open_transport ends section 6
       6.2 HTTP                    HttpTransport: status mapping (401/403 -> mcp_auth_required /
                                   mcp_permission_denied, status_failure for the rest), SSE resumption (GET +
                                   Last-Event-ID)
       6.3 stdio framing           a bounded line reader (read_lines), the stderr tail kept for errors (LineTail)
       6.4 the child process       ChildProcess (its group, reaping) and StdioTransport over it: lines that are
                                   not JSON-RPC skipped, an answer too deep or too long failing its request, the
                                   server's stderr in an error; what it inherits: section 4
    7. Client flows             the per-operation OpContext, McpSession and the flows, in four rooms:
       7.1 OpContext, McpSession   the per-operation context, McpSession (many requests in flight, each with its
                                   own deadline); a tentative modern era refused as a legacy server refuses falls
                                   back to initialize once (fall_back); who answers a server's questions
                                   (InputSource): a legacy elicitation/create answered mid-call, cancel when
                                   nothing can answer it
       7.2 negotiation             negotiate: the era probe over a real session, the stdio probe window
       7.3 requests                discover_listing (the one pagination of tools/list, resources/list,
                                   resources/templates/list and prompts/list, and its guards); a capability
                                   the server lacks: no request (require_capability); read_resource (an
                                   unknown URI: mcp_resource_not_found), list_resources, list_prompts,
                                   get_prompt: the CLI's and the resident's one path each (list_kept: a warm
                                   session's kept lists); complete_argument (completion/complete, for Tab); how
                                   long a kept catalogue stays fresh (ttlMs, list_changed), for 10.3 and 10.5;
                                   call; a call that times out or is interrupted cancelled
                                   (notifications/cancelled); the one multi-round-trip loop of input_required
                                   (send_with_input: the requestState echoed exactly, at most MAX_INPUT_ROUNDS
                                   rounds)
       7.3.1 tasks                   a call run as a task and waited for (--task, --detach); --task-status,
                                     --task-result [--wait], --task-cancel, --tasks; a legacy HTTP task's own
                                     session (ResumedSessions); the handle store (task_store_path)
       7.4 the CLI's operations    one session each: --check, --tools (and --tools --brief), --resources (and
                                   --resources --brief), --read, --prompts, --prompt, --skills, --skill (read
                                   lazily, each file verified before the next: load_skill, the resident's too;
                                   the skills extension declared by their sessions only: SkillSessions),
                                   --dry-run
    8. Schema flags             inputSchema -> typed flags, values, validation, answers, in seven rooms:
       8.1 flag records            ToolFlag, BodyOnlyField (why a property gets no flag: set it with --body)
       8.2 local references        resolve_schema: one resolver for flags and help examples, within one
                                   operation's budget (SchemaWork: shared, counted, the deadline asked)
       8.3 flags                   build_tool_flags: a schema -> typed flags; --tools --brief (describe_brief)
       8.4 values                  a flag's text -> its JSON value, positional-argument errors; a prompt's
                                   string flags (parse_prompt_arguments), its arguments checked against its
                                   declaration before prompts/get (check_prompt_arguments)
       8.5 validation, bounded     jsonschema run locally within budgets (patterns, sizes, depth, the deadline)
       8.6 validate_arguments      the quick path for common schemas, problems worded: the inputSchema checked
                                   locally before a call
       8.7 answers                 a server's questions answered: --input, --inputs, --input-action typed by the
                                   requested schema with its defaults (CommandLineInput), a person on the
                                   terminal (TerminalQuestions)
    9. Output                   envelopes, --jq, --raw, help text, completion, blobs to files, in seven rooms:
       9.1 envelopes               build_success, build_failure
       9.2 --jq                    JqProgram: compiled, applied with number fidelity
       9.3 --raw                   a result as plain text (render_raw_result; a read's texts and a prompt's
                                   messages with their roles: render_raw_data); a server's text on a terminal, its
                                   controls escaped (render_raw_text)
       9.4 help text               the root help (--help, --version) and the resident's (--resident --help)
       9.5 completion              the shell completion scripts (--completion bash|zsh|fish) and their words:
                                   servers, tools, flags, prompt names, resource URIs, values (quoted)
       9.6 server and tool help    render_server_help, render_tool_help, render_prompt_help (--prompt NAME
                                   --help), render_template_help (--read TEMPLATE --help, offline)
       9.7 blobs to files          --out: a result's base64 found (find_blobs), checked against --max-blob-bytes
                                   before anything is written (decode_blobs), saved through 2.7 (save_blobs); a
                                   verified skill's copy (save_skill)
   10. Resident mode            many users' sessions behind one JSON stdin/stdout process, and the --keep-alive
                                process's kept sessions, in five rooms:
       10.1 registry, credentials  SQLite / HTTP sources, one user's view, a row -> ResolvedServer:
       10.1.1 rows, credentials      a row checked, a user's credential chosen (select_credential), what a
                                     listing shows
       10.1.2 sources                the SQLite file (SqliteRegistry, --registry --import/--list) and the HTTP
                                     endpoint (HttpRegistry), open_registry
       10.2 sessions               events, the live session, slots, the pool (limits: --max-processes and
                                   --max-user-processes; eviction, reaper; a crashed stdio child's retry-after
                                   back-off):
       10.2.1 events                 EventSink (--events); a URI as an event names it (build_event_uri)
       10.2.2 the live session       ResidentSession, the adapter over the section-7 engine; skills on it
                                     (with_skills: the extension per request, a legacy server's own session)
       10.2.3 slots, limits          a slot per server instance, the open-file limit
       10.2.4 whose secrets          which secrets scrub whose answers
       10.2.5 the pool               SessionPool: limits, eviction, the idle reaper (--idle-timeout), back-off
       10.2.6 forwarded questions    --elicitation forward: ForwardedQuestions keeps input_required rounds for
                                     the platform's resume (--input-timeout, a per-user cap), ResidentInput
       10.3 names, catalogues      injected mcp_{server}_{tool} names (shortened past 64 characters), model-ready
                                   definitions per family (OpenAI, OpenAI strict, Anthropic, Gemini), Catalogues
                                   (cached per session):
       10.3.1 injected names         build_injected_names (a server's resource-reading tool among them)
       10.3.2 definitions            build_definitions per model family; a model's arguments back to the schema;
                                     the resource-reading tool of --inject-resource-tools (build_resource_reader)
       10.3.3 a command, catalogues  the parsed command record, Catalogues cached per session
       10.4 command server         the reader, a bounded worker pool, Actions (the eleven), the end that answers all
                                   (shutdown, EOF, a signal), an error worded for the platform (platform_error):
       10.4.1 parsing a command      limits, the platform's wording, parse_command
       10.4.2 pool, writer           the bounded worker pool, the answer writer, commands in flight
       10.4.3 Actions                one method per action; resources and prompts (list_resources, read_resource
                                     with its blobs as size and sha256 within --max-blob-bytes: build_resource_contents,
                                     list_prompts, get_prompt) on the CLI's section-7 paths; skills
                                     (list_skills, read_skill: load_skill, the CLI's verification; the extension
                                     declared per request, or by a legacy server's own session: with_skills)
       10.4.4 ResidentServer         the reader and the end that answers all (--shutdown-grace); memory;
                                     run_resident
       10.5 warm sessions          WarmSessions: the --keep-alive process's kept sessions, lent by key
                                   (warm_session_key), catalogues kept by section 7's rule; its client and
                                   process: 11.4
   11. CLI                      argument routing and ``main(argv) -> int``, the one exception -> exit ladder;
                                the --keep-alive client and its background process (WarmServer), in five rooms:
       11.1 argument routing       parse_argv -> Invocation, check_invocation (MODE_TABLE: the options each mode
                                   takes): --config, --timeout, --verbose, --insecure, --check, --tools, --brief,
                                   --dry-run, --jq, --raw, --help, --resources, --read, --prompts, --prompt,
                                   --input, --inputs, --input-action, --resume, --skills, --skill, --out,
                                   --max-blob-bytes
       11.2 --body                 inline, @FILE or - (stdin), read and bounded (read_body)
       11.3 the runner             Environment, Runner: one command, local or remote, to its envelope; which
                                   servers a Tab may start, and where (resolve_completion_server); the kept
                                   input rounds of --resume (save_resume, load_resume: 0600, expiring)
       11.3.1 tasks                  a task handle's commands (task_commands), the store written (save_task), the
                                     task-id modes run (run_task_mode)
       11.4 --keep-alive           the client and its background process (WarmServer), --sessions and --stop, the
                                   client's Ctrl-C (Interrupt), a process that dies mid-call; the sessions it
                                   keeps: 10.5
       11.5 main, exit ladder      last: word_for_cli, main, report_error; a short command's exit skips the
                                   interpreter's last collection (_end_without_a_last_collection)

Exception tree (section 1)::

    BkmcpError                      exit 1 unless stated
     +-- UsageError                 usage_error
     +-- InvalidConfigError         invalid_mcp_config
     +-- ConfigNotFoundError        mcp_config_not_found
     +-- ServerNotFoundError        mcp_server_not_found
     +-- MissingEnvironmentVariableError  missing_environment_variable
     +-- AuthConflictError          mcp_auth_conflict
     +-- InvalidArgumentsError      invalid_mcp_arguments
     +-- UnsupportedOptionError     unsupported_option
     +-- ToolNotFoundError          mcp_tool_not_found
     +-- PromptNotFoundError        mcp_prompt_not_found
     +-- SkillNotFoundError         mcp_skill_not_found
     +-- BlobWriteError             blob_write_error       (--out DIR unusable, a write failed)
     +-- OutNeedsOneBlobError       out_needs_one_blob     (--out - and not exactly one blob)
     +-- InvalidJqExpressionError   invalid_jq_expression
     +-- JqUnavailableError         jq_unavailable
     +-- InternalError              internal_error (exit 1 before a remote step, 2 after)
     +-- InvalidCommandError        invalid_command        (resident mode, docs/contract.md §11.2)
     +-- UnknownActionError         unknown_action         (resident)
     +-- InputResumeInvalidError    input_resume_invalid   (resident, --elicitation forward)
     +-- InputPendingLimitError     input_pending_limit    (resident, --elicitation forward)
     +-- DuplicateTaskIdError       duplicate_task_id      (resident)
     +-- CredentialsMissingError    mcp_credentials_missing (resident)
     +-- ServerDisabledError        mcp_server_disabled    (resident)
     +-- RegistryError              registry_error         (resident)
     +-- RemoteError                exit 2
          +-- AuthRequiredError     mcp_auth_required
          +-- PermissionDeniedError mcp_permission_denied
          +-- ConnectionFailedError mcp_connection_error
          +-- McpTimeoutError       mcp_timeout
          +-- ProtocolError         mcp_protocol_error
          +-- DiscoveryIncompleteError  mcp_discovery_incomplete
          +-- ToolError             mcp_tool_error
          +-- CapabilityUnsupportedError  mcp_capability_unsupported
          +-- InputRequiredError    input_required         (the server asks a question no answer was given for)
          +-- ResourceNotFoundError mcp_resource_not_found
          +-- TaskFailedError       mcp_task_failed
          +-- TaskCancelledError    mcp_task_cancelled
          +-- TaskRunningError      mcp_task_running
          +-- TaskExpiredError      mcp_task_expired
          +-- JqError               jq_error
          +-- BlobTooLargeError     blob_too_large         (a blob over --max-blob-bytes: nothing written)
          +-- SkillUnverifiedError  skill_unverified       (a skill file not as skills/list said)
          +-- CancelledError        mcp_cancelled          (exit 130: Ctrl-C once a request was sent)
          +-- ResourceLimitError    resource_limit         (resident)

An error is a value: every field it carries (``request_sent``, ``http_status``, ``remedy``, ``what``/``budget``…)
is declared on ``BkmcpError``; a raised or stored error is never changed (``copy(**changes)``), and each front end
words it once from its fields (section 11 ``word_for_cli``, section 10 ``platform_error``).

Heavy dependencies (httpx, jsonschema, jq) are imported lazily by the code paths that need them, so
``bkmcp --help`` and ``bkmcp <server> --help`` import none of them. Nothing connects at import time.
"""

from __future__ import annotations

import _thread
import os
import sys
import time

# Start-up matters (`bkmcp --help` within 2x of a bare interpreter, docs/contract.md §13): typing, collections.abc and
# dataclasses (which imports inspect, ast, dis and tokenize) cost more than the rest of bkmcp together, and json,
# re and decimal are not needed by the help paths. Type checkers see the real modules; the running program uses
# the already-loaded `_collections_abc`, the small `dataclass` of section 2, and imports json, re and decimal on
# first use (`JsonNumber` too: see section 2).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import decimal
    import json
    import re
    from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
    from dataclasses import dataclass, field
    from typing import IO, Any, TypeVar

    _Error = TypeVar("_Error", bound="BkmcpError")
else:
    from _collections_abc import Callable, Iterable, Iterator, Mapping, Sequence

    class _LazyModule:
        """A module imported on first attribute access; it then replaces itself in this module's globals."""

        def __init__(self, name):
            self._name = name

        def __getattr__(self, attr):
            module = __import__(self._name)
            globals()[self._name] = module
            return getattr(module, attr)

    decimal = _LazyModule("decimal")
    json = _LazyModule("json")
    re = _LazyModule("re")


class _LazyPattern:
    """A regular expression compiled on first use (module-level patterns must not import ``re`` at start-up)."""

    def __init__(self, pattern: str, flags: int = 0) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(re.compile(*self._source), attr)
        setattr(self, attr, value)  # later lookups skip __getattr__: the bound method of the compiled pattern
        return value


def lazy_re(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return _LazyPattern(pattern, flags)  # type: ignore[return-value]


__version__ = "0.1.0"

# ======================================================================================================
# 1. Errors & exit codes
# ======================================================================================================

EXIT_OK = 0
EXIT_LOCAL = 1
EXIT_REMOTE = 2
EXIT_INTERRUPTED = 130


class BkmcpError(Exception):
    """Root of every error bkmcp reports. Subclasses only set ``code`` and ``exit_status``.

    An error is a value: every field is declared here and set when it is made; a raised error is never changed
    (``copy(**changes)`` makes the changed one) and a stored one is never raised (raise a copy). Its words are
    neutral; each front end words it once from its fields (the CLI's ``word_for_cli``, the resident's
    ``platform_error``).

    ``details`` are extra machine-readable fields of the error object (e.g. ``outcome``, ``variable``);
    ``data`` is what the remote operation produced before it failed (completed stages, raw results).
    ``remedy`` names what ``hint`` (the neutral wording) advises, for a front end to say in its own words;
    ``notes`` are further clauses of the hint that every front end keeps. A timeout keeps ``what`` did not
    happen within ``budget`` seconds. ``cause`` is an error this one's message quotes (``{cause}`` in
    ``message`` stands for its message), also reported as ``details.cause``. ``request_sent`` says whether the request
    reached the wire (None: not known, which counts as sent: never resend). An HTTP status keeps
    ``http_status``, ``http_message`` (the JSON-RPC message of the body, era evidence) and ``session_lost``.
    """

    code = "internal_error"
    exit_status = EXIT_LOCAL

    def __init__(
        self,
        message: str,
        *,
        hint: str | None = None,
        data: dict[str, Any] | None = None,
        details: dict[str, Any] | None = None,
        remedy: str | None = None,
        notes: tuple[str, ...] = (),
        what: str | None = None,
        budget: float | None = None,
        cause: BkmcpError | None = None,
        request_sent: bool | None = None,
        http_status: int | None = None,
        http_message: Message | None = None,
        session_lost: bool = False,
    ) -> None:
        self.template = message
        self.message: str = message if cause is None else message.replace("{cause}", cause.message)
        super().__init__(self.message)
        self.hint = hint
        self.data = data
        self.details = dict(details or {})
        self.remedy = remedy
        self.notes = notes
        self.what = what
        self.budget = budget
        self.cause = cause
        if cause is not None:
            self.details["cause"] = {"code": cause.code, "message": cause.message, **cause.details}
        self.request_sent = request_sent
        self.http_status = http_status
        self.http_message = http_message
        self.session_lost = session_lost

    _FIELDS = (
        "hint", "data", "details", "remedy", "notes", "what", "budget", "cause",
        "request_sent", "http_status", "http_message", "session_lost",
    )  # fmt: skip

    def copy(self: _Error, **changes: Any) -> _Error:
        """A new error of the same class with ``changes`` to its fields (``message`` included); the chain it was
        raised from stays, its traceback does not."""
        fields = {name: getattr(self, name) for name in self._FIELDS}
        fields["details"] = dict(self.details)
        fields.update(changes)
        copy = type(self)(fields.pop("message", self.template), **fields)
        copy.__cause__, copy.__suppress_context__ = self.__cause__, self.__suppress_context__
        return copy

    @property
    def full_hint(self) -> str | None:
        """The neutral hint with its notes."""
        return "; ".join(part for part in (self.hint, *self.notes) if part) or None

    def error_object(self) -> dict[str, Any]:
        obj: dict[str, Any] = {"code": self.code, "message": self.message}
        hint = self.full_hint
        if hint:
            obj["hint"] = hint
        obj.update(self.details)
        return obj


class UsageError(BkmcpError):
    code = "usage_error"


class InvalidConfigError(BkmcpError):
    code = "invalid_mcp_config"


class ConfigNotFoundError(BkmcpError):
    code = "mcp_config_not_found"


class ServerNotFoundError(BkmcpError):
    code = "mcp_server_not_found"


class MissingEnvironmentVariableError(BkmcpError):
    code = "missing_environment_variable"


class AuthConflictError(BkmcpError):
    code = "mcp_auth_conflict"


class InvalidArgumentsError(BkmcpError):
    code = "invalid_mcp_arguments"


class UnsupportedOptionError(BkmcpError):
    code = "unsupported_option"


class ToolNotFoundError(BkmcpError):
    code = "mcp_tool_not_found"


class PromptNotFoundError(BkmcpError):
    code = "mcp_prompt_not_found"


class InvalidJqExpressionError(BkmcpError):
    code = "invalid_jq_expression"


class JqUnavailableError(BkmcpError):
    code = "jq_unavailable"


class SkillNotFoundError(BkmcpError):
    code = "mcp_skill_not_found"


class BlobWriteError(BkmcpError):
    """``--out DIR`` unusable (not a directory, not writable) or a write that failed: what was written is removed."""

    code = "blob_write_error"


class OutNeedsOneBlobError(BkmcpError):
    """``--out -`` with no blob or more than one in the result: nothing is written."""

    code = "out_needs_one_blob"


class InternalError(BkmcpError):
    code = "internal_error"


class RemoteError(BkmcpError):
    """An error after the remote operation started: reported on stdout with exit status 2."""

    code = "mcp_connection_error"
    exit_status = EXIT_REMOTE


class AuthRequiredError(RemoteError):
    code = "mcp_auth_required"


class PermissionDeniedError(RemoteError):
    code = "mcp_permission_denied"


class ConnectionFailedError(RemoteError):
    code = "mcp_connection_error"


class McpTimeoutError(RemoteError):
    code = "mcp_timeout"


class ProtocolError(RemoteError):
    code = "mcp_protocol_error"


class DiscoveryIncompleteError(RemoteError):
    code = "mcp_discovery_incomplete"


class ToolError(RemoteError):
    code = "mcp_tool_error"


class CapabilityUnsupportedError(RemoteError):
    code = "mcp_capability_unsupported"


class InputRequiredError(RemoteError):
    code = "input_required"


class ResourceNotFoundError(RemoteError):
    code = "mcp_resource_not_found"


class TaskFailedError(RemoteError):
    """A task that ended ``failed`` (docs/contract.md §5, "Tasks"): the server's error or status message."""

    code = "mcp_task_failed"


class TaskCancelledError(RemoteError):
    code = "mcp_task_cancelled"


class TaskRunningError(RemoteError):
    """A task still running when bkmcp stopped waiting (``--timeout``) or was asked for a result not there yet."""

    code = "mcp_task_running"


class TaskExpiredError(RemoteError):
    """The server no longer knows a task (its ``ttl`` passed, or it never made one with that id)."""

    code = "mcp_task_expired"


class JqError(RemoteError):
    code = "jq_error"


class BlobTooLargeError(RemoteError):
    """A blob over ``--max-blob-bytes`` (docs/contract.md §7 "Blobs to files"): nothing was written."""

    code = "blob_too_large"


class SkillUnverifiedError(RemoteError):
    """A skill file whose digest, size or frontmatter name is not what ``skills/list`` said: nothing printed or
    written (docs/contract.md §2 "Skills")."""

    code = "skill_unverified"


class CancelledError(RemoteError):
    """Ctrl-C after the first request was sent (docs/contract.md §7): exit 130, the envelope on stdout."""

    code = "mcp_cancelled"
    exit_status = EXIT_INTERRUPTED


# Resident mode (docs/contract.md §11.2): codes a command can fail with besides the CLI's. Exit statuses only matter for
# start-up failures (``registry_error``: the registry cannot be opened) and the ``--registry --import/--list`` tools.


class InvalidCommandError(BkmcpError):
    code = "invalid_command"


class UnknownActionError(BkmcpError):
    code = "unknown_action"


class InputResumeInvalidError(BkmcpError):
    code = "input_resume_invalid"


class InputPendingLimitError(BkmcpError):
    code = "input_pending_limit"


class DuplicateTaskIdError(BkmcpError):
    code = "duplicate_task_id"


class CredentialsMissingError(BkmcpError):
    code = "mcp_credentials_missing"


class ServerDisabledError(BkmcpError):
    code = "mcp_server_disabled"


class ResourceLimitError(RemoteError):
    code = "resource_limit"


class RegistryError(BkmcpError):
    code = "registry_error"


def error_classes() -> list[type[BkmcpError]]:
    """Every concrete error class, for documentation and uniqueness tests."""
    seen: list[type[BkmcpError]] = []
    stack: list[type[BkmcpError]] = [BkmcpError]
    while stack:
        cls = stack.pop()
        seen.append(cls)
        stack.extend(cls.__subclasses__())
    return [c for c in seen if c not in (BkmcpError, RemoteError)]


# ======================================================================================================
# 2. Helpers: JSON with number fidelity, redaction, durations, deadlines, logging
# ======================================================================================================


# -- 2.1 records, the heap, JSON with number fidelity (parse_json, dump_json) ------------------------------------------

# Set by ``main`` when this process runs one short command of its own (not the resident, not the --keep-alive
# background process, not a caller of ``main(argv)``): once the HTTP stack is loaded it is frozen for the
# collections still to come (``import_httpx``), and the exit skips the interpreter's last collection (11.5,
# ``_end_without_a_last_collection``, which says why that is exact).
SHORT_COMMAND: list[bool] = []


def freeze_heap() -> None:
    """Leave every object that exists now out of the collections to come (``gc.freeze``, CPython 3.7+; an
    interpreter without it collects as before)."""
    import gc

    getattr(gc, "freeze", lambda: None)()


if not TYPE_CHECKING:
    _MISSING = object()

    class _Field:
        __slots__ = ("default_factory",)

        def __init__(self, default_factory: Callable[[], Any]) -> None:
            self.default_factory = default_factory

    def field(*, default_factory: Callable[[], Any]) -> Any:
        """``dataclasses.field`` for the one use bkmcp has: a ``default_factory``."""
        return _Field(default_factory)

    _COMPILE_INIT_AFTER = 8  # instances a class makes through the generic __init__ before it gets its own

    def dataclass(cls: Any = None, *, frozen: bool = False, slots: bool = False) -> Any:
        """``dataclasses.dataclass`` for the features bkmcp uses, without importing ``inspect``.

        Fields come from the class annotations in order, defaults from class attributes or ``field()``;
        generates ``__init__`` (positional or keyword), ``__repr__``, ``__eq__``, and for ``frozen`` classes
        read-only attributes and ``__hash__`` (non-frozen classes are unhashable, as with dataclasses);
        ``slots`` rebuilds the class with ``__slots__`` (its methods must not use zero-argument ``super()``).

        ``__init__`` starts generic, which costs nothing at import; a class that makes more than a few instances
        (the records of a 10 000-property catalogue) then gets an ``__init__`` compiled for its fields, as fast
        as a hand-written one.
        """

        def wrap(cls: Any) -> Any:
            names = tuple(cls.__dict__.get("__annotations__", {}))
            defaults = {n: cls.__dict__[n] for n in names if n in cls.__dict__}
            for name, value in defaults.items():
                if isinstance(value, _Field) or slots:
                    delattr(cls, name)
            if slots:
                body = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
                body.update(__slots__=names, __qualname__=cls.__qualname__)
                cls = type(cls)(cls.__name__, cls.__bases__, body)
            qualname = cls.__qualname__
            made = 0

            def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
                nonlocal made
                made += 1
                if made == _COMPILE_INIT_AFTER:
                    cls.__init__ = _compiled_init(names, defaults, frozen)
                if len(args) > len(names):
                    raise TypeError(f"{qualname}() takes {len(names)} arguments, {len(args)} given")
                values = dict(zip(names, args))
                for key, value in kwargs.items():
                    if key not in names or key in values:
                        raise TypeError(f"{qualname}() got an unexpected or repeated argument {key!r}")
                    values[key] = value
                for name in names:
                    if name not in values:
                        default = defaults.get(name, _MISSING)
                        if default is _MISSING:
                            raise TypeError(f"{qualname}() missing argument {name!r}")
                        values[name] = default.default_factory() if isinstance(default, _Field) else default
                    object.__setattr__(self, name, values[name])

            def __repr__(self: Any) -> str:
                return f"{qualname}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

            def __eq__(self: Any, other: Any) -> Any:
                if other.__class__ is not self.__class__:
                    return NotImplemented
                return all(getattr(self, n) == getattr(other, n) for n in names)

            cls.__init__, cls.__repr__, cls.__eq__ = __init__, __repr__, __eq__
            cls.__dataclass_fields__ = _DataclassFields(cls.__dict__.get("__annotations__", {}), defaults, frozen)
            if frozen:

                def __setattr__(self: Any, name: str, value: Any) -> None:
                    raise AttributeError(f"cannot assign to field {name!r} of frozen {qualname}")

                def __delattr__(self: Any, name: str) -> None:
                    raise AttributeError(f"cannot delete field {name!r} of frozen {qualname}")

                def __hash__(self: Any) -> int:
                    return hash(tuple(getattr(self, n) for n in names))

                cls.__setattr__, cls.__delattr__, cls.__hash__ = __setattr__, __delattr__, __hash__
            else:
                cls.__hash__ = None
            return cls

        return wrap if cls is None else wrap(cls)

    class _DataclassFields:
        """``__dataclass_fields__``, built by the real ``dataclasses`` on first access, so that ``fields``,
        ``replace``, ``asdict``, ``astuple`` and ``is_dataclass`` work on these classes as the type checker
        promises, while start-up never imports ``dataclasses`` (with ``inspect``)."""

        def __init__(self, annotations: dict[str, Any], defaults: dict[str, Any], frozen: bool) -> None:
            self._spec = (dict(annotations), defaults, frozen)

        def __get__(self, obj: Any, owner: type) -> dict[str, Any]:
            import dataclasses

            annotations, defaults, frozen = self._spec
            body: dict[str, Any] = {"__annotations__": annotations}
            for name, default in defaults.items():
                body[name] = (
                    dataclasses.field(default_factory=default.default_factory)
                    if isinstance(default, _Field)
                    else default
                )
            twin: Any = dataclasses.dataclass(frozen=frozen)(type(owner.__name__, (), body))
            found: dict[str, Any] = twin.__dataclass_fields__
            type.__setattr__(owner, "__dataclass_fields__", found)  # later lookups are a plain attribute
            return found

    def _compiled_init(names: tuple[str, ...], defaults: dict[str, Any], frozen: bool) -> Callable[..., None]:
        """``def __init__(self, a, b=_d_b, c=_MISSING): ...`` for these fields, as dataclasses generates it."""
        namespace: dict[str, Any] = {"_MISSING": _MISSING, "_set": object.__setattr__}
        params, lines = [], []
        for name in names:
            default = defaults.get(name, _MISSING)
            if default is _MISSING:
                params.append(name)
            elif isinstance(default, _Field):
                namespace[f"_f_{name}"] = default.default_factory
                params.append(f"{name}=_MISSING")
                lines.append(f"    if {name} is _MISSING: {name} = _f_{name}()")
            else:
                namespace[f"_d_{name}"] = default
                params.append(f"{name}=_d_{name}")
        lines += [f"    _set(self, {n!r}, {n})" if frozen else f"    self.{n} = {n}" for n in names]
        exec(f"def __init__(self, {', '.join(params)}):\n" + "\n".join(lines or ["    pass"]), namespace)
        return namespace["__init__"]  # type: ignore[no-any-return]


def _define_json_number() -> type:
    class JsonNumber(decimal.Decimal):
        """A JSON number that Python's float cannot hold exactly, kept as its original text.

        It compares and validates like a number (it is a ``Decimal``) and ``dump_json`` writes its text back
        byte for byte, so ``1e400``, ``0.1`` and ``12345678901234567890.5`` survive a round trip.
        """

        __slots__ = ("text",)
        text: str

        def __new__(cls, text: str) -> JsonNumber:
            self = super().__new__(cls, text)
            self.text = text
            return self

        def __repr__(self) -> str:
            return f"JsonNumber({self.text!r})"

        def __reduce__(self) -> tuple[Any, ...]:
            return (JsonNumber, (self.text,))

    return JsonNumber


if TYPE_CHECKING:

    class JsonNumber(decimal.Decimal):
        text: str

        def __new__(cls, text: str) -> JsonNumber: ...

else:

    class _StandInMeta(type):
        def __instancecheck__(cls, obj):
            return bool(_JSON_NUMBER_CLASS) and isinstance(obj, _JSON_NUMBER_CLASS[0])

        def __subclasscheck__(cls, sub):
            return bool(_JSON_NUMBER_CLASS) and issubclass(sub, _JSON_NUMBER_CLASS[0])

    class JsonNumber(metaclass=_StandInMeta):
        """Stands in for the real ``JsonNumber`` (``_define_json_number``) until the first one is made.

        ``decimal`` (with ``collections``) is a measurable part of start-up and the help paths never meet a
        non-integer number, so the ``Decimal`` subclass is created on first use and replaces this class in the
        module globals. No instance of the stand-in exists; a reference to it taken early (``from bkmcp import
        JsonNumber``) still constructs real instances and answers ``isinstance`` for the real class.
        """

        def __new__(cls, text):
            return _real_json_number()(text)

    _JSON_NUMBER_CLASS = []
    _JSON_NUMBER_LOCK = _thread.allocate_lock()  # _thread is built in: no import cost (threading would be)

    def _real_json_number():
        """The real class, created once even when many threads meet their first number together (resident
        mode): checked, then created under the lock and checked again, so every caller gets the same class."""
        if not _JSON_NUMBER_CLASS:
            with _JSON_NUMBER_LOCK:
                if not _JSON_NUMBER_CLASS:
                    real = _define_json_number()
                    real.__module__, real.__qualname__ = __name__, "JsonNumber"
                    globals()["JsonNumber"] = real
                    _JSON_NUMBER_CLASS.append(real)
        return _JSON_NUMBER_CLASS[0]


class JsonInputError(ValueError):
    """Invalid JSON text. ``str()`` says what and where, never echoes the text itself."""

    def __init__(self, reason: str, line: int = 0, column: int = 0, *, too_deep: bool = False) -> None:
        self.reason = reason
        self.line = line
        self.column = column
        self.too_deep = too_deep  # valid as far as read, but nested deeper than bkmcp parses (not a JSON rule)
        where = f" at line {line} column {column}" if line else ""
        super().__init__(f"{reason}{where}")


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


INT_DIGITS_LIMIT = 4000  # below CPython's int/str conversion limit (4300 digits)


def _json_float(text: str) -> Any:
    return JsonNumber(text)  # looked up per call: the stand-in only until the first one is made


def parse_int(text: str) -> Any:
    # "-0" as an int would be written back as "0": keep its text (it still compares equal to 0)
    return int(text) if len(text) <= INT_DIGITS_LIMIT and text != "-0" else JsonNumber(text)


def _strict_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_json(text: str | bytes, *, strict_keys: bool = True) -> Any:
    """Parse JSON keeping every number exact: integers as ``int``, other numbers as ``JsonNumber``.

    ``strict_keys`` rejects duplicate object keys at every level (config, --body, flag values). ``NaN`` and
    ``Infinity`` are rejected. Errors are ``JsonInputError`` with a position but never the input text.

    Valid input takes a fast path (``_scan_json``: the scanner ``json.loads`` uses, with the same settings,
    without importing ``json``). Any failure there is parsed again by the plain ``json`` module, whose answer
    is the one reported: on CPython 3.10 and 3.11 the C scanner cannot build its own error unless
    ``json.decoder`` is already imported (it fails with ``SystemError`` instead), and error messages differ
    between versions. So errors are always exactly the plain module's, and values are the plain module's by
    construction (tests/unit/test_json.py compares the two paths on generated input;
    tests/artifact/test_fresh_fuzz.py does it in a fresh interpreter of every CPython).
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise JsonInputError("input is not valid UTF-8") from exc
    if text.startswith("\ufeff"):
        text = text[1:]
    try:
        return _scan_json(text, strict_keys)
    except (ValueError, RecursionError, SystemError, StopIteration):
        pass  # the plain decoder below says what is wrong (outside this handler: no chained context)
    return parse_json_plain(text, strict_keys=strict_keys)


def _scan_json(text: str, strict_keys: bool) -> Any:
    """``json.JSONDecoder.decode`` without the json module: the same scanner and context, the same whitespace
    rule (``[ \\t\\n\\r]*`` before and after), the same "extra data" check. Raises on any invalid input."""
    start = len(text) - len(text.lstrip(JSON_SPACE))
    value, end = _json_scanner(strict_keys)(text, start)
    if len(text[end:].lstrip(JSON_SPACE)):
        raise ValueError("extra data")
    return value


def parse_json_plain(text: str, *, strict_keys: bool = True) -> Any:
    """``parse_json`` through the ``json`` module itself (the reference the fast path is tested against)."""
    decoder = json.JSONDecoder(
        object_pairs_hook=_strict_pairs if strict_keys else None,
        parse_float=_json_float,
        parse_int=parse_int,
        parse_constant=_reject_constant,
    )
    try:
        return decoder.decode(text)
    except _DuplicateKey as exc:
        where = _duplicate_key_position(text)
        line, column = (text.count("\n", 0, where) + 1, where - text.rfind("\n", 0, where)) if where >= 0 else (0, 0)
        raise JsonInputError(f"duplicate key {json.dumps(exc.key, ensure_ascii=False)}", line, column) from None
    except RecursionError:  # the parser recurses: Python's recursion limit is bkmcp's, JSON itself has none
        raise JsonInputError(f"nesting too deep: {too_deep_words()}", too_deep=True) from None
    except json.JSONDecodeError as exc:
        reason = exc.msg.lower() if text.strip() else "empty input"
        raise JsonInputError(reason, exc.lineno, exc.colno) from None
    except ValueError as exc:  # a rejected constant (NaN, Infinity)
        raise JsonInputError(str(exc)) from None


def too_deep_words() -> str:
    """What ``JsonInputError.too_deep`` means, in words that say whose limit it is."""
    return f"nested deeper than bkmcp parses (about {recursion_ceiling()} levels)"


def json_depth(value: Any) -> int:
    """How deeply ``value`` nests objects and arrays (a scalar: 0, ``[[]]``: 2); a walk with its own stack."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        node, level = pending.pop()
        if isinstance(node, (dict, list)):
            deepest = max(deepest, level)
            pending.extend((child, level + 1) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


_HEADROOM_LOCK = _thread.allocate_lock()
_HEADROOM: list[int] = []  # while raised: [Python's own recursion limit, the limit raised to, callers running]


def recursion_ceiling() -> int:
    """Python's recursion limit as bkmcp found it: what ``call_with_headroom`` raises for a while does not count."""
    with _HEADROOM_LOCK:
        return _HEADROOM[0] if _HEADROOM else sys.getrecursionlimit()


def call_with_headroom(work: Callable[[], Any], frames: int) -> Any:
    """``work()`` with room for ``frames`` Python frames: on a thread of its own, with a stack that holds them on
    every CPython (before 3.12 each Python frame takes C stack; 3.12 and 3.13 count C recursion apart, which no
    stack changes) and the recursion limit raised while it runs. The limit is the process's: raised once for all
    concurrent callers and put back when the last one ends. Returns or raises what ``work`` does; RecursionError
    when no such thread can be started (e.g. no memory for its stack)."""
    import threading

    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append((True, work()))
        except BaseException as exc:  # handed to the caller's thread as it is
            outcome.append((False, exc))

    stack = (16 << 20) + (frames * 512 if sys.version_info < (3, 12) else 0)
    with _HEADROOM_LOCK:
        if not _HEADROOM:
            _HEADROOM.extend((sys.getrecursionlimit(), 0, 0))
        if frames + _HEADROOM[0] > _HEADROOM[1]:
            _HEADROOM[1] = frames + _HEADROOM[0]
            sys.setrecursionlimit(_HEADROOM[1])
        _HEADROOM[2] += 1
        try:
            previous = threading.stack_size(min(stack, 1 << 30))
            try:
                worker = threading.Thread(target=run, name="bkmcp-deep", daemon=True)
                worker.start()
            finally:
                threading.stack_size(previous)
        except (RuntimeError, MemoryError, ValueError):
            worker = None
    try:
        if worker is None:
            raise RecursionError("no thread with a stack that deep could be started")
        worker.join()
    finally:
        with _HEADROOM_LOCK:
            _HEADROOM[2] -= 1
            if not _HEADROOM[2]:
                sys.setrecursionlimit(_HEADROOM[0])
                _HEADROOM.clear()
    ok, value = outcome[0]
    if not ok:
        raise value
    return value


def _duplicate_key_position(text: str) -> int:
    """Where the duplicate key that ``_strict_pairs`` rejected stands (its second occurrence), or -1.

    Only reached on that error, so a small walk over the already-validated text is fine: it takes the first
    object, in closing order, that repeats a key (the one the decoder's hook saw first)."""
    import importlib

    scanstring = importlib.import_module("json.decoder").scanstring  # stdlib since 2.6; typeshed omits it

    plain = json.JSONDecoder()
    found: list[int] = []

    def skip(pos: int) -> int:
        while text[pos] in JSON_SPACE:
            pos += 1
        return pos

    def value(pos: int) -> int:
        pos = skip(pos)
        opening = text[pos]
        if opening not in "{[":
            return plain.raw_decode(text, pos)[1]
        closing = "}" if opening == "{" else "]"
        seen: set[str] = set()
        repeated = -1
        pos = skip(pos + 1)
        if text[pos] == closing:
            return pos + 1
        while True:
            if opening == "{":
                pos = skip(pos)
                key, end = scanstring(text, pos + 1)
                if key in seen and repeated < 0:
                    repeated = pos
                seen.add(key)
                pos = skip(end) + 1  # the ':'
            pos = skip(value(pos))
            if found:
                return pos
            if text[pos] != ",":
                if repeated >= 0:
                    found.append(repeated)
                return pos + 1
            pos += 1

    try:
        value(0)
    except (ValueError, IndexError, RecursionError):
        return -1
    return found[0] if found else -1


JSON_SPACE = " \t\n\r"
_SCANNERS: dict[bool, Callable[[str, int], tuple[Any, int]]] = {}


class _ScanContext:
    """The settings ``_json.make_scanner`` reads (what ``json.JSONDecoder`` would hold)."""

    def __init__(self, strict_keys: bool) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = _strict_pairs if strict_keys else None
        self.parse_float = _json_float
        self.parse_int = parse_int
        self.parse_constant = _reject_constant
        self.memo: dict[str, str] = {}


def _json_scanner(strict_keys: bool) -> Callable[[str, int], tuple[Any, int]]:
    """The C scanner behind ``json.loads``, used directly: importing ``json`` pulls in ``re`` (and ``enum``),
    which would be most of ``bkmcp <server> --help``'s start-up (docs/contract.md §13). Only for valid input: see
    ``parse_json``."""
    scanner = _SCANNERS.get(strict_keys)
    if scanner is None:
        try:
            from _json import make_scanner  # type: ignore[import-not-found]
        except ImportError:  # not CPython: the pure-Python scanner of the json package
            from json.scanner import make_scanner
        scanner = _SCANNERS[strict_keys] = make_scanner(_ScanContext(strict_keys))  # type: ignore[arg-type]
    return scanner


_RAW_MARK = "\ue000bkmcp-raw-"


def dump_json(value: Any, *, indent: int | None = None, sort_keys: bool = False) -> str:
    """Serialise ``value``; ``JsonNumber`` (and any ``Decimal``) is written as its exact text.

    The C encoder cannot emit raw text, so exact numbers are first encoded as unique marker strings and the
    markers are replaced afterwards. The marker carries a per-call nonce, so no real string can collide.
    """
    raws: list[str] = []
    nonce = ""

    def default(obj: Any) -> Any:
        nonlocal nonce
        if isinstance(obj, decimal.Decimal):
            if not nonce:
                nonce = os.urandom(6).hex()
            if not isinstance(obj, JsonNumber) and not obj.is_finite():
                raise TypeError("NaN and infinite numbers are not valid JSON")
            raws.append(obj.text if isinstance(obj, JsonNumber) else str(obj))
            return f"{_RAW_MARK}{nonce}-{len(raws) - 1}\ue001"
        if isinstance(obj, (set, frozenset, tuple)):
            return list(obj)
        raise TypeError(f"cannot serialise {type(obj).__name__} as JSON")

    separators = (",", ": ") if indent is not None else (",", ":")
    out = json.dumps(
        value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys, default=default
    )
    if raws:
        pattern = re.compile('"' + re.escape(_RAW_MARK + nonce) + r"-(\d+)\ue001" + '"')
        out = pattern.sub(lambda m: raws[int(m.group(1))], out)
    if _ESCAPE_ALWAYS.search(out):
        # JSON allows "\udcff" escapes that are not valid Unicode; written raw they make every UTF-8 stream fail.
        # U+0085/U+2028/U+2029 are line breaks to many readers: escaped, an envelope stays one line everywhere.
        out = _ESCAPE_ALWAYS.sub(lambda m: f"\\u{ord(m.group()):04x}", out)
    return out


_ESCAPE_ALWAYS = lazy_re("[\ud800-\udfff\u0085\u2028\u2029]")


def is_json_integer(value: Any) -> bool:
    """JSON Schema's integer (draft 6+): a number with no fractional part; never a boolean."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    if isinstance(value, float):
        return value.is_integer()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            return False
        if value.as_tuple().exponent >= 0:  # type: ignore[operator]
            return True
        try:
            return value == value.to_integral_value()
        except decimal.DecimalException:
            return False
    return False


def json_type(value: Any, *, integers: bool = False) -> str:
    """The JSON type of a parsed value: null, boolean, number (``integer`` when asked and integral), string,
    array, object; any other Python type by its name."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float, decimal.Decimal)):
        return "integer" if integers and is_json_integer(value) else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


# -- 2.2 redaction: secrets never printed (Redactor, redact_url) -------------------------------------------------------

REDACTED = "***"
_SECRET_HEADER_NAMES = frozenset(
    {"authorization", "x-bkapi-authorization", "proxy-authorization", "cookie", "set-cookie", "x-api-key"}
)
_SECRET_NAME_WORDS = ("token", "secret", "key", "auth", "password", "ticket")


def is_secret_name(name: str) -> bool:
    """True when a header (or environment variable) name marks its value as a credential (docs/contract.md §4)."""
    lowered = name.lower()
    return lowered in _SECRET_HEADER_NAMES or any(word in lowered for word in _SECRET_NAME_WORDS)


def redact_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    """A copy of ``headers`` whose credential values print as ``***``."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {name: (REDACTED if is_secret_name(name) else value) for name, value in items}


class Redactor:
    """Scrubs every known secret value from diagnostic text: the one redaction used at output boundaries.

    ``limit`` bounds how many secrets it keeps (the least recently added go first: the resident mode's
    process-wide redactor, whose secrets are system credentials that rotate); ``base`` adds another redactor's
    secrets to this one's (a resident session's log: its own secrets plus the system ones), longest first
    across both. Safe to use from many threads.
    """

    MIN_FRAGMENT = 4  # fragments shorter than this (e.g. a 1-char token part) would mangle unrelated text

    def __init__(self, *, limit: int | None = None, base: Redactor | None = None) -> None:
        self._secrets: list[str] = []  # longest first
        self._known: dict[str, None] = {}  # the same secrets, oldest first
        self._limit = limit
        self._base = base
        self._version = 0
        self._merged: tuple[tuple[int, int], list[str]] | None = None
        self._lock = _thread.allocate_lock()

    def add(self, value: str, *, whole: bool = True) -> None:
        """Register a secret. ``whole`` values are always scrubbed; fragments only when long enough."""
        if not value or not (whole or len(value) >= self.MIN_FRAGMENT):
            return
        with self._lock:
            if value in self._known:
                if self._limit is not None:  # recently used again: the last to go
                    del self._known[value]
                    self._known[value] = None
                return
            self._known[value] = None
            if self._limit is not None and len(self._known) > self._limit:
                del self._known[next(iter(self._known))]
            self._secrets = sorted(self._known, key=len, reverse=True)
            self._version += 1

    def learn(self, other: Redactor) -> None:
        """Scrub every secret ``other`` scrubs too (its own, not its ``base``'s): each ``whole``."""
        for secret in other._secrets:
            self.add(secret)

    def secrets(self) -> list[str]:
        """Every secret scrubbed (``base``'s included), longest first."""
        base = self._base
        if base is None:
            return self._secrets
        key = (self._version, base._version)
        merged = self._merged
        if merged is None or merged[0] != key:
            merged = self._merged = (key, sorted({*self._secrets, *base.secrets()}, key=len, reverse=True))
        return merged[1]

    def scrub(self, text: str) -> str:
        for secret in self.secrets():
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def scrub_value(self, value: Any) -> Any:
        """Scrub strings inside a JSON-like value (used for error objects, not for tool results)."""
        if isinstance(value, str):
            return self.scrub(value)
        if isinstance(value, dict):
            return {k: self.scrub_value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub_value(v) for v in value]
        return value


_SECRET_QUERY_NAMES = frozenset({"sig", "code", "sid", "pwd", "pass", "hmac", "otp", "jwt"})
_SECRET_QUERY_WORDS = ("signature", "credential", "session", "passw", "bearer")


def redact_url(url: str) -> str:
    """``url`` as bkmcp prints it: the value of each secret-looking query parameter becomes ``***``.

    A parameter is secret when its (decoded) name passes ``is_secret_name`` (token, key, secret, auth, password,
    ticket: ``access_token``, ``apikey``, ``api_key``, ``key`` …), is one of ``sig code sid pwd pass hmac otp
    jwt``, or contains ``signature``, ``credential``, ``session``, ``passw`` or ``bearer`` (case-insensitive).
    Everything else is kept byte for byte, names included, so the URL stays recognisable.
    """
    base, mark, query = url.partition("?")
    if not mark or not query:
        return url
    query, hash_mark, _fragment = query.partition("#")
    pieces = []
    for piece in query.split("&"):
        name, equals, _value = piece.partition("=")
        if "%" in name or "+" in name:  # urllib.parse (with re) only when the name is encoded: help stays lean
            from urllib.parse import unquote_plus

            name_text = unquote_plus(name)
        else:
            name_text = name
        lowered = name_text.lower()
        secret = (
            is_secret_name(lowered)
            or lowered in _SECRET_QUERY_NAMES
            or any(word in lowered for word in _SECRET_QUERY_WORDS)
        )
        pieces.append(f"{name}={REDACTED}" if equals and secret else piece)
    return f"{base}?{'&'.join(pieces)}" + (f"#{REDACTED}" if hash_mark else "")


# -- 2.3 durations and deadlines (parse_duration, Deadline) ------------------------------------------------------------

_DURATION = lazy_re(r"^([0-9]+(?:\.[0-9]+)?|\.[0-9]+)(ms|s|m|h)?$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(text: str, *, option: str = "--timeout") -> float:
    """``500ms``, ``30s``, ``2m``, ``1h`` or a bare number of seconds; must be positive and finite."""
    match = _DURATION.match(text.strip()) if text else None
    if not match:
        raise UsageError(
            f"invalid duration for {option}: {text!r}",
            hint="use a positive duration such as 500ms, 30s, 2m, 1h or a number of seconds",
        )
    seconds = float(match.group(1)) * _DURATION_UNITS[match.group(2)]
    if not seconds > 0 or seconds > 7 * 24 * 3600:
        raise UsageError(f"{option} must be positive and at most 168h, got {text!r}")
    return seconds


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    return f"{seconds:g}s"


# The one time budget when none is given: a remote operation (--timeout), a resident command, a registry read.
DEFAULT_TIMEOUT = 60.0


class Deadline:
    """The whole remote operation's time budget (docs/contract.md §2): every step asks how much is left. An
    ``interrupt`` (a warm client's Ctrl-C: ``Interrupt``, section 11.4) ends it early with ``KeyboardInterrupt``,
    as a Ctrl-C does. Built whole: nothing is attached to it afterwards."""

    def __init__(
        self, seconds: float, clock: Callable[[], float] = time.monotonic, *, interrupt: Interrupt | None = None
    ) -> None:
        self.seconds = seconds
        self.interrupt = interrupt
        self._clock = clock
        self._start = self.start = clock()  # when the budget began (a resident command: its arrival)
        self.end = self._start + seconds

    def remaining(self) -> float:
        """Seconds left; raises ``McpTimeoutError`` once the budget is spent (``KeyboardInterrupt`` once
        interrupted)."""
        if self.interrupt is not None and self.interrupt.fired:
            raise KeyboardInterrupt
        left = self.left()
        if left <= 0:
            raise budget_error("the operation did not finish", self.seconds)
        return left

    def left(self) -> float:
        """Seconds left by this deadline's clock, ``<= 0`` once spent; never raises (``remaining`` does)."""
        return self.end - self._clock()

    def elapsed_ms(self) -> int:
        return int((self._clock() - self._start) * 1000)

    def wait(self, event: Any) -> bool:
        """Wait for ``event`` (a ``threading.Event``) until the end; True once it is set, False when time is up."""
        while not event.wait(max(self.left(), 0)):
            if self._clock() >= self.end:  # a wait may end a hair early: the deadline decides
                return False
        return True


_SLOW_HINT = "allow more time if the server is slow"


def budget_error(
    what: str, seconds: float, *, remedy: str = "timeout", hint: str = _SLOW_HINT, **fields: Any
) -> McpTimeoutError:
    """``what`` did not happen within the ``seconds`` budget, in neutral words. ``what`` and ``budget`` stay on
    the error so that each front end words its own message (the CLI names ``--timeout``, the resident mode a
    command's ``timeout_ms``)."""
    return McpTimeoutError(
        f"{what} within {format_duration(seconds)}", hint=hint, remedy=remedy, what=what, budget=seconds, **fields
    )


# -- 2.4 logging: the line writer that never blocks, Log ---------------------------------------------------------------


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a stream without ``isatty`` or a closed one)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (OSError, ValueError):
        return False


LINE_BUFFER = 10_000  # lines waiting for a slow stream (LineWriter); beyond that they are dropped and counted
_PIPE_ATOMIC = 4096  # POSIX PIPE_BUF minimum: a pipe that select() calls writable takes a write this small whole


def _log_lines_dropped(count: int) -> str:
    return f"bkmcp: warning: {count} log line{'s' if count != 1 else ''} dropped (stderr was not read)\n"


class LineWriter:
    """Whole lines to one stream without ever holding the caller back (issue 16 item 13): the resident mode's
    ``--events`` and operator log. The one-shot CLI writes its log synchronously and never uses this.

    A line is written at once when the stream can take it without blocking (a file, a pipe with room: ``select``,
    then one ``os.write`` of at most ``PIPE_BUF`` bytes, which a pipe takes whole); otherwise it waits in a bounded
    buffer that a writer thread empties as the stream drains (order kept; writers sharing a stream share one
    ``LineWriter``, so their lines never interleave mid-line). A line that finds the buffer full, or that the
    stream refuses (a full disk), is dropped and counted by its ``kind``; the drops are reported once, by one line
    per kind (``notes[kind](count)``), when writing works again. ``close`` waits a bounded time: what a stream nobody
    reads still holds then is dropped (counted, never reported: nobody would read it)."""

    def __init__(self, stream: IO[str] | None, *, owned: bool = False, buffer: int = LINE_BUFFER) -> None:
        import threading

        self.stream = stream
        self.owned = owned  # a file opened for us (closed by close()); stderr is not ours to close
        self.notes: dict[str, Callable[[int], str]] = {"log": _log_lines_dropped}  # how each kind's drops read
        self.dropped: dict[str, int] = {}
        self.written = 0
        self._limit = buffer
        self._backlog: Any = None  # collections.deque[(kind, line)] waiting for the writer thread (made on first use)
        self._unreported: dict[str, int] = {}  # drops not yet reported, by kind
        self._lock = threading.Condition()
        self._writer: Any = None
        self._closing = False
        self._abandon = False  # close() gave up on a stream nobody reads
        self._fd: int | None = None
        if stream is not None:
            try:
                self._fd = stream.fileno()
                stream.flush()
            except (AttributeError, OSError, ValueError):  # not a file (tests): written through its own write()
                self._fd = None

    def write(self, line: str, kind: str = "log") -> None:
        """Queue one line (ending with a newline); never blocks on the stream."""
        if self.stream is None:
            return
        with self._lock:
            if not self._backlog and not self._unreported and self._write_now(line, kind):
                return
            if self._closing and self._writer is None or len(self._backlog or ()) >= self._limit:
                self._drop(kind)
                return
            if self._backlog is None:
                import collections

                self._backlog = collections.deque()
            self._backlog.append((kind, line))
            if self._writer is None:
                import threading

                self._writer = threading.Thread(target=self._drain, name="bkmcp-lines", daemon=True)
                self._writer.start()
            self._lock.notify()

    def _give_up_backlog(self) -> None:
        """The lines still waiting will never be written (under ``_lock``): counted as dropped, never reported."""
        for kind, _line in self._backlog or ():
            self._drop(kind, report=False)
        if self._backlog:
            self._backlog.clear()

    def _drop(self, kind: str, *, report: bool = True) -> None:
        self.dropped[kind] = self.dropped.get(kind, 0) + 1
        if report:
            self._unreported[kind] = self._unreported.get(kind, 0) + 1

    def _write_now(self, line: str, kind: str) -> bool:
        """Write ``line`` if that cannot block (under ``_lock``); False when it would (it then waits in the buffer)."""
        if self._fd is None:
            self._count(self._write_stream(line), kind)
            return True
        data = line.encode("utf-8", "surrogatepass")
        if len(data) > _PIPE_ATOMIC or not self._writable(self._fd, 0):
            return False
        self._count(self._write_fd(self._fd, data), kind)
        return True

    def _count(self, ok: bool, kind: str) -> None:
        if ok:
            self.written += 1
        else:
            self._drop(kind)

    @staticmethod
    def _writable(fd: int, timeout: float) -> bool:
        import select

        try:
            return bool(select.select([], [fd], [], timeout)[1])
        except (OSError, ValueError):  # a closed descriptor: the write says so (and the line counts as dropped)
            return True

    @staticmethod
    def _write_fd(fd: int, data: bytes) -> bool:
        try:
            while data:
                data = data[os.write(fd, data) :]
            return True
        except OSError:  # a full disk, a closed stream: dropped, serving goes on
            return False

    def _write_stream(self, line: str) -> bool:
        assert self.stream is not None
        try:
            self.stream.write(line)
            self.stream.flush()
            return True
        except (OSError, ValueError):
            return False

    def _drain(self) -> None:
        """The writer thread: the backlog, oldest first, each line once the stream can take it; never blocked in a
        write (``select`` first, with a timeout, so ``close`` can always end it). Drops are reported before the
        next line, and at the end if the stream takes them."""
        while True:
            with self._lock:
                while not self._backlog and not self._closing:
                    self._lock.wait()
                if self._abandon or not self._backlog and not self._unreported:
                    self._give_up_backlog()
                    return
            if self._fd is not None and not self._writable(self._fd, 0.2):
                continue
            with self._lock:  # a line stays first in the backlog until written: write() keeps the order
                for kind, count in list(self._unreported.items()):
                    note = self.notes.get(kind)
                    del self._unreported[kind]
                    if note is not None and self._write_line(note(count)):  # a refused report stays in dropped
                        self.written += 1
                if self._backlog:
                    kind, line = self._backlog[0]
                    self._count(self._write_line(line), kind)
                    self._backlog.popleft()

    def _write_line(self, line: str) -> bool:
        """One line from the writer thread, in pieces a pipe takes whole once ``select`` says it has room."""
        if self._fd is None:
            return self._write_stream(line)
        data = line.encode("utf-8", "surrogatepass")
        for start in range(0, len(data), _PIPE_ATOMIC):
            if start and not self._writable(self._fd, 0.2):
                return False
            if not self._write_fd(self._fd, data[start : start + _PIPE_ATOMIC]):
                return False
        return True

    def close(self, wait: float = 2.0) -> None:
        """Write what waits, for at most ``wait`` seconds (a stream nobody reads is then given up: its lines count as
        dropped), then close a stream we own. Later lines are written only when the stream takes them at once."""
        with self._lock:
            self._closing = True
            writer = self._writer
            self._lock.notify_all()
        if writer is not None:
            writer.join(max(wait, 0.0))
            if writer.is_alive():
                with self._lock:
                    self._abandon = True
                    self._lock.notify_all()
                writer.join(1.0)  # at most one select timeout (0.2 s): it never blocks in a write
        with self._lock:
            self._writer = None
            self._give_up_backlog()  # what was queued while the writer thread was ending
        if self.stream is not None and self.owned:
            stream, self.stream = self.stream, None  # its descriptor may be reused: never written again
            try:
                stream.close()
            except (OSError, ValueError):  # every line went to the descriptor or was counted: none is lost here
                pass


class Log:
    """Diagnostics on stderr. ``debug`` only with ``-v``; every line goes through the redactor. Written at once
    (the one-shot CLI), or through a ``LineWriter`` (the resident mode: a stderr nobody reads never blocks)."""

    def __init__(
        self,
        stream: IO[str],
        *,
        verbose: bool = False,
        redactor: Redactor | None = None,
        lines: LineWriter | None = None,
    ) -> None:
        self.stream = stream
        self.verbose = verbose
        self.redactor = redactor or Redactor()
        self.lines = lines  # the resident mode: whole lines through a LineWriter, never blocking (no progress line)
        self._warned: set[str] = set()
        self._line_open = False  # a terminal progress line is on screen without its newline yet

    def scoped(self, redactor: Redactor, *, lines: LineWriter | None = None) -> Log:
        """The same stream, verbosity, line writer (or ``lines``) and once-only warnings, scrubbed by ``redactor``
        (the resident mode gives each session a log that knows that session's secrets)."""
        log = Log(self.stream, verbose=self.verbose, redactor=redactor, lines=lines or self.lines)
        log._warned = self._warned
        return log

    @property
    def is_tty(self) -> bool:
        return self.lines is None and is_terminal(self.stream)

    def _write(self, line: str) -> None:
        if self.lines is not None:
            self.lines.write(self.redactor.scrub(line) + "\n", "log")
            return
        try:
            if self._line_open:  # any other line first clears the progress line (redrawn by its next update)
                self._line_open = False
                self.stream.write("\r\x1b[K")
            self.stream.write(self.redactor.scrub(line) + "\n")
            self.stream.flush()
        except (OSError, ValueError):
            pass  # a closed stderr must never turn into a second failure

    def debug(self, message: str) -> None:
        if self.verbose:
            self._write(f"bkmcp: {message}")

    def note(self, message: str) -> None:
        """One line the user should see without -v (not a warning: bkmcp does what was asked)."""
        self._write(f"bkmcp: {message}")

    def warn(self, message: str, *, once_key: str | None = None) -> None:
        if once_key is not None:
            if once_key in self._warned:
                return
            self._warned.add(once_key)
        self._write(f"bkmcp: warning: {message}")

    def progress(self, message: str) -> None:
        """Progress for long work: one updating line when stderr is a terminal, else a plain line with -v."""
        if not self.is_tty:
            if self.verbose:
                self._write(f"bkmcp: {message}")
            return
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns or 80  # 0: the size is not known
        except (AttributeError, OSError, ValueError):
            columns = 80
        # scrubbed before clipping (a secret is never half shown); clipped so the line never wraps, or the
        # carriage return would redraw only its last row
        text = terminal_safe(self.redactor.scrub(f"bkmcp: {message}"))[: max(columns - 1, 20)]
        try:
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()
            self._line_open = True
        except (OSError, ValueError):
            pass

    def progress_end(self) -> None:
        """The call is over: a terminal progress line gets its newline (its last state stays visible)."""
        if self._line_open:
            self._line_open = False
            try:
                self.stream.write("\n")
                self.stream.flush()
            except (OSError, ValueError):
                pass


# -- 2.5 terminal text, the progress line, close spellings, tool-option tokens -----------------------------------------

_TERMINAL_UNSAFE = lazy_re(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


CONTROL = lazy_re(r"[\x00-\x1f\x7f-\x9f]")  # C0, DEL and C1: what a terminal would act on


def clip_text(text: str, limit: int) -> str:
    """``text`` for one line of a message: controls as spaces, at most ``limit`` characters (an ellipsis ends it)."""
    text = CONTROL.sub(" ", text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def printable(text: str) -> str:
    """Server text made safe for a terminal: control (and other unprintable) characters shown as JSON escapes,
    never interpreted. Applied to JSON text it keeps it valid JSON: such characters only occur inside strings."""
    if text.isprintable():
        return text
    return "".join(ch if ch.isprintable() or ch == " " else json.dumps(ch)[1:-1] for ch in text)


def short_text(value: Any, limit: int = 40) -> str:
    """A value quoted in a message: its text or JSON, ``printable``, at most ``limit`` characters."""
    text = value if isinstance(value, str) else dump_json(value)
    text = printable(text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def terminal_safe(text: str) -> str:
    """Server text for a terminal: C0/C1 controls (escape sequences, carriage returns) become spaces."""
    return _TERMINAL_UNSAFE.sub(" ", text)


def _progress_number(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float, JsonNumber)):
        return None
    text = dump_json(value) if not isinstance(value, int) or abs(value) < 10**30 else "1e30+"
    return text if len(text) <= 24 else text[:23] + "…"


def render_progress(params: Mapping[str, Any], elapsed: float) -> str | None:
    """``progress 3/10: message (1.2s)`` for a ``notifications/progress``; None when ``progress`` is no number."""
    done = _progress_number(params.get("progress"))
    if done is None:
        return None
    total = _progress_number(params.get("total"))
    text = f"progress {done}" + (f"/{total}" if total is not None else "")
    message = params.get("message")
    if isinstance(message, str) and message.strip():
        message = terminal_safe(message).strip()
        text += ": " + (message if len(message) <= 200 else message[:199] + "…")
    return f"{text} ({elapsed:.1f}s)"


class ProgressLine:
    """The progress of one call whose request carried ``token`` (docs/contract.md §5): notifications for that token are
    rendered through ``Log.progress``; ``end()`` finishes the line."""

    def __init__(self, log: Log, token: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.token = token
        self._clock = clock
        self._start = clock()
        self.shown = 0

    def update(self, params: Mapping[str, Any]) -> bool:
        """Show one notification's params; False when it is not for this call's token (or is malformed)."""
        if params.get("progressToken") != self.token:
            return False
        text = render_progress(params, self._clock() - self._start)
        if text is None:
            return False
        self.shown += 1
        self.log.progress(text)
        return True

    def end(self) -> None:
        self.log.progress_end()


# What the CLI's argv parser (section 11) hands to the schema flags (section 8). It lives here, not in section 8,
# because every command line is parsed, and the pyz runs section 8 only when a tool's schema is used
# (docs/building.md, deferred sections).
@dataclass(frozen=True)
class ToolToken:
    """One tool option as typed after the tool name: ``--name value`` or ``--name=value``."""

    name: str
    value: str | None
    has_equals: bool
    raw: str


def closest_names(name: str, candidates: Iterable[str], *, limit: int = 3) -> list[str]:
    """Close spellings of ``name`` among ``candidates`` (for "did you mean" hints)."""
    import difflib

    pool = list(candidates)
    found = difflib.get_close_matches(name, pool, n=limit, cutoff=0.6)
    lowered = [c for c in pool if c.lower() == name.lower() and c not in found]
    return (lowered + found)[:limit]


# -- 2.6 URI templates: RFC 6570 expanded locally (parse_uri_template, expand_uri_template) ----------------------------
# `--read TEMPLATE --VAR VALUE` (docs/contract.md §2): levels 1-3 of RFC 6570 (simple, +, #, ., /, ;, ?, &) and the
# level-4 prefix `:n` and explode `*` as they apply to a string value (every value given as a flag is one). Here,
# not in section 5, because `--read TEMPLATE --help` is a help path (section 11's rules).

# operator -> (first, separator, named, if empty, reserved characters allowed): RFC 6570 appendix A
_URI_OPERATORS = {
    "": ("", ",", False, "", False),
    "+": ("", ",", False, "", True),
    "#": ("#", ",", False, "", True),
    ".": (".", ".", False, "", False),
    "/": ("/", "/", False, "", False),
    ";": (";", ";", True, "", False),
    "?": ("?", "&", True, "=", False),
    "&": ("&", "&", True, "=", False),
}
_URI_VARSPEC = lazy_re(
    r"^((?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})(?:\.?(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2}))*)(?::([1-9][0-9]{0,3})|(\*))?$"
)
_URI_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_URI_RESERVED = frozenset(":/?#[]@!$&'()*+,;=")


@dataclass(frozen=True)
class UriExpression:
    """One ``{…}`` of a URI template: its operator and its variables as (name, prefix length or None)."""

    operator: str
    variables: tuple[tuple[str, int | None], ...]


def is_uri_template(text: str) -> bool:
    return "{" in text


def parse_uri_template(template: str) -> list[str | UriExpression]:
    """A URI template as literal text and expressions; a malformed one (an unclosed ``{``, a ``}`` alone, an
    unknown operator or a bad variable name) is a ``UsageError`` naming it."""
    parts: list[str | UriExpression] = []
    rest = template
    while rest:
        start, close = rest.find("{"), rest.find("}")
        if close != -1 and (start == -1 or close < start):
            raise UsageError(f"URI template {template!r}: a '}}' without its '{{'")
        if start == -1:
            parts.append(rest)
            break
        if close == -1:
            raise UsageError(f"URI template {template!r}: a '{{' is never closed")
        if start:
            parts.append(rest[:start])
        body, rest = rest[start + 1 : close], rest[close + 1 :]
        operator = body[:1] if body[:1] in _URI_OPERATORS and body[:1] else ""
        if body[:1] in "=,!@|":
            raise UsageError(f"URI template {template!r}: operator {body[:1]!r} is reserved by RFC 6570")
        variables = []
        for spec in body[len(operator) :].split(","):
            match = _URI_VARSPEC.match(spec)
            if match is None:
                raise UsageError(f"URI template {template!r}: {spec!r} is not a variable name")
            variables.append((match.group(1), int(match.group(2)) if match.group(2) else None))
        parts.append(UriExpression(operator, tuple(variables)))
    return parts


def uri_template_variables(template: str) -> list[str]:
    """The variables of a URI template, each once, in order of appearance."""
    names: dict[str, None] = {}
    for part in parse_uri_template(template):
        if isinstance(part, UriExpression):
            names.update((name, None) for name, _prefix in part.variables)
    return list(names)


def _uri_encode(text: str, reserved: bool) -> str:
    out = []
    for index, char in enumerate(text):
        if char in _URI_UNRESERVED or reserved and char in _URI_RESERVED:
            out.append(char)
        elif reserved and char == "%" and re.match(r"[0-9A-Fa-f]{2}", text[index + 1 : index + 3]):
            out.append(char)  # a pct-encoded triplet passes through `+` and `#` as it is
        else:
            out.append("".join(f"%{byte:02X}" for byte in char.encode("utf-8", "surrogatepass")))
    return "".join(out)


def expand_uri_template(template: str, values: Mapping[str, str]) -> str:
    """RFC 6570 expansion of ``template`` with string ``values``; a variable without a value is undefined (left
    out, as the RFC says: the CLI requires every variable before it gets here)."""
    out: list[str] = []
    for part in parse_uri_template(template):
        if isinstance(part, str):
            out.append(part)
            continue
        first, separator, named, if_empty, reserved = _URI_OPERATORS[part.operator]
        items = []
        for name, prefix in part.variables:
            if name not in values:
                continue
            value = values[name] if prefix is None else values[name][:prefix]
            encoded = _uri_encode(value, reserved)
            items.append((f"{name}{'=' + encoded if encoded else if_empty}") if named else encoded)
        if items:
            out.append(first + separator.join(items))
    return "".join(out)


def parse_template_values(template: str, tokens: Sequence[ToolToken]) -> dict[str, str]:
    """``--VAR VALUE`` flags after ``--read TEMPLATE``: each a variable of the template, given once, with a value,
    and every variable given; anything else is a ``UsageError`` before anything is sent (docs/contract.md §2)."""
    names = uri_template_variables(template)
    values: dict[str, str] = {}
    shown = ", ".join(f"--{name}" for name in names) or "none"
    for token in tokens:
        if token.name not in names:
            raise UsageError(
                f"--{token.name} is not a variable of {template!r} (its variables: {shown})",
                hint=f"bkmcp <server> --read '{template}' --help",
            )
        if token.name in values:
            raise UsageError(f"variable --{token.name} given more than once")
        if token.value is None:
            raise UsageError(f"variable --{token.name} needs a value", hint=f"write --{token.name}=VALUE")
        values[token.name] = token.value
    missing = [name for name in names if name not in values]
    if missing:
        raise UsageError(
            f"{template!r} needs {', '.join(f'--{name}' for name in missing)}",
            hint=f"bkmcp <server> --read '{template}' {' '.join(f'--{name} VALUE' for name in names)}",
        )
    return values


# -- 2.7 blob files: the one writer of --out, safe against its server (build_blob_name, BlobWriter) --------------------
# `--out DIR` (docs/contract.md §7 "Blobs to files") and `--skill NAME --out DIR` put what a server sent into a
# directory the user named; the server never chooses where. A file's name is built from the URI's last segment and
# the MIME type (build_blob_name: never a path, `..`, a leading dot, NUL or a control character); a skill's relative
# path is taken only part by part (parse_relative_path). Every file is opened relative to the directory's
# descriptor with O_CREAT | O_EXCL | O_NOFOLLOW: a link is never followed and an existing name never overwritten (a
# numbered name instead, `dot-1.png`); files are 0644. Here, in section 2, because the CLI (11) and the resident (10)
# both write through it.

# --max-blob-bytes, one rule for the CLI's --out and the resident's include_blobs: the bytes of one decoded blob
# (docs/contract.md §7 "Blobs to files", §11.2); one over it is blob_too_large (blob_over_cap)
MAX_BLOB_BYTES = 64 * 1024 * 1024
BLOB_NAME_LIMIT = 100  # characters of a file name built from a URI, its extension included
_BLOB_NUMBER_LIMIT = 1000  # `name-1.png` … `name-999.png`, then blob_write_error
_BLOB_NAME_UNSAFE = lazy_re(r"[^A-Za-z0-9._+-]+")
_MIME_EXTENSIONS = {
    "application/json": ".json",
    "application/octet-stream": ".bin",
    "application/pdf": ".pdf",
    "application/zip": ".zip",
    "audio/mpeg": ".mp3",
    "audio/ogg": ".ogg",
    "audio/wav": ".wav",
    "audio/x-wav": ".wav",
    "image/gif": ".gif",
    "image/jpeg": ".jpg",
    "image/png": ".png",
    "image/svg+xml": ".svg",
    "image/webp": ".webp",
    "text/csv": ".csv",
    "text/html": ".html",
    "text/markdown": ".md",
    "text/plain": ".txt",
}


def blob_over_cap(what: str, size: int, limit: int, outcome: str, hint: str, data: Any = None) -> BlobTooLargeError:
    """``blob_too_large``: ``what`` (a blob, a skill file) decodes to ``size`` bytes, over ``--max-blob-bytes``
    (``limit``), the one rule of the CLI's ``--out`` and the resident's ``include_blobs``; ``outcome``: what was
    not done."""
    return BlobTooLargeError(
        f"{what} is {size} bytes, over --max-blob-bytes {limit}: {outcome}",
        hint=hint,
        details={"bytes": size, "limit": limit},
        data=data,
    )


def build_blob_name(uri: Any, mime_type: Any, kind: str = "blob") -> str:
    """The file name of one blob: the URI's last path segment (query and fragment dropped, percent-decoding
    undone), every run of characters but ``A-Z a-z 0-9 . _ + -`` made one ``_``, leading dots and dashes and
    trailing dots dropped, cut to ``BLOB_NAME_LIMIT``; ``kind`` (``image``, ``audio``, ``blob``) when nothing is
    left; an extension from ``mime_type`` when it has none (``.bin`` for an unknown type)."""
    import urllib.parse

    segment = ""
    if isinstance(uri, str):
        path = uri.split("#", 1)[0].split("?", 1)[0]
        segment = urllib.parse.unquote(path.rstrip("/").rsplit("/", 1)[-1]).replace("\\", "/").rsplit("/", 1)[-1]
        if "/" not in path and ":" in segment:  # `urn:a:b.png`, `data:…`: no segment, the part after the scheme
            segment = segment.rsplit(":", 1)[-1]
    name = _BLOB_NAME_UNSAFE.sub("_", segment).lstrip(".-").rstrip(".")
    name = name.strip("_") if set(name) <= {"_", "."} else name
    stem, dot, extension = name.rpartition(".")
    if not dot or not stem:
        mime = mime_type.split(";", 1)[0].strip().lower() if isinstance(mime_type, str) else ""
        stem, extension = name or kind, _MIME_EXTENSIONS.get(mime, ".bin")[1:]
    extension = extension[:16]
    return stem[: BLOB_NAME_LIMIT - len(extension) - 1] + "." + extension


def parse_relative_path(path: Any) -> tuple[str, ...] | None:
    """A server's relative file path (a skill's file) as its parts, or None when it is not one to write: empty,
    absolute, with a backslash, an empty, ``.`` or ``..`` part, NUL or a control character, a part over 255
    bytes, a part starting with ``-``."""
    if not isinstance(path, str) or not path or path.startswith("/") or "\\" in path or CONTROL.search(path):
        return None
    parts = tuple(path.split("/"))
    for part in parts:
        if part in ("", ".", "..") or part.startswith("-") or len(part.encode("utf-8", "surrogatepass")) > 255:
            return None
    return parts


class BlobWriter:
    """The directory ``--out`` named, open (created with its parents when missing), and every file written into it
    (docs/contract.md §7 "Blobs to files"). ``write`` makes a new file relative to the directory's descriptor,
    never following a link and never replacing a file; ``discard`` removes what this writer made (a failed
    command leaves nothing half-written). Raises ``BlobWriteError``."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.made: list[tuple[str, bool]] = []  # (path relative to the directory, is a directory), in order
        try:
            os.makedirs(path, exist_ok=True)
            self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise BlobWriteError(
                f"--out {path}: {exc.strerror or exc}", hint="name a directory you can write to (created if missing)"
            ) from None

    def close(self) -> None:
        os.close(self.fd)

    def discard(self) -> None:
        """Remove every file and directory this writer made, last first."""
        for relative, is_dir in reversed(self.made):
            try:
                (os.rmdir if is_dir else os.unlink)(relative, dir_fd=self.fd)
            except OSError:
                pass
        self.made.clear()

    def _open_dir(self, parts: Sequence[str], create: bool) -> int:
        """A descriptor of the directory ``parts`` below this one (each made when ``create`` and missing), no part
        a link."""
        fd = os.dup(self.fd)
        flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            for depth, part in enumerate(parts):
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                        self.made.append(("/".join(parts[: depth + 1]), True))
                    except FileExistsError:
                        pass
                inner = os.open(part, flags, dir_fd=fd)
                os.close(fd)
                fd = inner
        except BaseException:
            os.close(fd)
            raise
        return fd

    def make_directory(self, name: str) -> str:
        """A new directory ``name`` in this one (``name-1``, ``name-2``… when taken); its name."""
        for number in range(_BLOB_NUMBER_LIMIT):
            candidate = name if number == 0 else f"{name}-{number}"
            try:
                os.mkdir(candidate, 0o755, dir_fd=self.fd)
            except FileExistsError:
                continue
            except OSError as exc:
                raise BlobWriteError(f"--out {self.path}: cannot make {candidate}: {exc.strerror or exc}") from None
            self.made.append((candidate, True))
            return candidate
        raise BlobWriteError(f"--out {self.path}: {name} and its numbered names are all taken")

    def write(self, parts: Sequence[str], data: bytes, *, numbered: bool = True) -> str:
        """A new file ``parts`` (directories below this one, then the file's name) holding ``data``, mode 0644; when
        the name is taken (a file, a link, anything) and ``numbered``, the first free ``stem-N.ext``. Returns the
        path written, under the directory as given."""
        *folders, name = parts
        stem, dot, extension = name.rpartition(".")
        stem, dot = (stem, dot) if stem else (name, "")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        try:
            folder = self._open_dir(folders, create=True)
        except OSError as exc:
            raise BlobWriteError(f"--out {self.path}: cannot make {'/'.join(folders)}: {exc.strerror or exc}") from None
        try:
            for number in range(_BLOB_NUMBER_LIMIT if numbered else 1):
                candidate = name if number == 0 else f"{stem}-{number}{dot}{extension}"
                try:
                    fd = os.open(candidate, flags, 0o644, dir_fd=folder)
                except FileExistsError:
                    continue
                relative = "/".join((*folders, candidate))
                self.made.append((relative, False))
                try:
                    os.fchmod(fd, 0o644)  # whatever the umask: the contract says 0644
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view) :]
                finally:
                    os.close(fd)
                return os.path.join(self.path, *folders, candidate)
        except OSError as exc:
            raise BlobWriteError(f"--out {self.path}: cannot write {name}: {exc.strerror or exc}") from None
        finally:
            os.close(folder)
        raise BlobWriteError(
            f"--out {self.path}: {'/'.join(parts)} exists"
            + (" and its numbered names are all taken" if numbered else "")
        )


# ======================================================================================================
# 3. Config
# ======================================================================================================

SUPPORTED_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", "2026-07-28")
CONFIG_FILE_NAME = "mcp.json"
# The smallest useful config, one stdio and one HTTP server: shown where a newcomer looks first (the not-found hint,
# the root help, skills/bkmcp/SKILL.md).
CONFIG_EXAMPLE_LINES = (
    '{"mcpServers": {',
    '  "fs": {"type": "stdio", "command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "/data"]},',
    '  "api": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}',
    "}}",
)
_HTTP_FIELDS = frozenset({"type", "url", "headers", "protocolVersion"})
_STDIO_FIELDS = frozenset({"type", "command", "args", "env", "cwd", "protocolVersion"})
# "disabled", which editors (Cline, Roo Code, Windsurf) write per entry, is honoured: a disabled entry is refused
# when selected. docs/contract.md §3.
_EDITOR_FIELDS = frozenset({"disabled"})
# What editors write per entry whose effect bkmcp does not have: accepted, and the selected entry's are named in a
# warning (field -> who writes it and what to do instead). docs/contract.md §3.
EDITOR_IGNORED_FIELDS = {
    "autoApprove": "Cline; bkmcp calls only the tool named on its command line, so it grants nothing",
    "alwaysAllow": "Roo Code, Kilo Code; bkmcp calls only the tool named on its command line, so it grants nothing",
    "timeout": "Cline, Roo Code, Claude Code; a call's time limit is the --timeout option",
    "disabledTools": "Windsurf, Roo Code; bkmcp hides no tool",
    "watchPaths": "Roo Code; bkmcp restarts no server on file changes",
    "envFile": 'Cursor, VS Code; its variables are not loaded: put them in "env"',
    "dev": "VS Code's watch and debug settings",
}
# Other spellings of "type" that editors write for a Streamable HTTP entry (Cline, Roo Code / Kilo Code).
_HTTP_TYPE_ALIASES = frozenset({"streamableHttp", "streamable-http"})
# Top-level fields of an editor's file that are about the editor, not its servers (VS Code's prompted inputs,
# Claude Desktop's app settings): accepted and not read.
_EDITOR_TOP_FIELDS = frozenset({"inputs", "globalShortcut", "preferences"})
_FORBIDDEN_HEADERS = frozenset(
    name.lower()
    for name in (
        "Host",
        "Content-Length",
        "Content-Type",
        "Accept",
        "Connection",
        "Keep-Alive",
        "Transfer-Encoding",
        "Upgrade",
        "TE",
        "Trailer",
        "Proxy-Connection",
        "Mcp-Session-Id",
        "MCP-Protocol-Version",
        "Mcp-Method",
        "Mcp-Name",
        "Last-Event-ID",
    )
)
_TOKEN_CHARS = frozenset("!#$%&'*+-.^_`|~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
ENV_REF = lazy_re(r"\$\$\{|\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$\{user\.([A-Za-z_][A-Za-z0-9_]*)\}|\$\{")


# Plain string checks instead of regular expressions: `bkmcp <server> --help` validates the whole file, and
# importing re (with enum) would be the largest part of its start-up.
def is_token(text: str) -> bool:
    """An RFC 9110 token (a valid header name)."""
    return bool(text) and all(ch in _TOKEN_CHARS for ch in text)


def has_control(text: str) -> bool:
    return any(ch < " " or ch == "\x7f" for ch in text)


@dataclass(frozen=True)
class ServerConfig:
    """One validated ``mcpServers`` entry, before environment expansion (templates kept as written)."""

    name: str
    type: str
    config_file: str
    url: str | None = None
    headers: tuple[tuple[str, str], ...] = ()
    command: str | None = None
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    protocol_version: str | None = None
    disabled: bool = False  # an editor's "disabled": true; refused when selected
    ignored: tuple[str, ...] = ()  # the entry's EDITOR_IGNORED_FIELDS, named in a warning when it is selected


@dataclass(frozen=True)
class ConfigFile:
    path: str
    servers: dict[str, ServerConfig]
    readable_by_others: bool = False
    # entries whose name no command line can select (``check_server_name``): (name, why), left out of servers
    invalid_names: tuple[tuple[str, str], ...] = ()
    # entries bkmcp cannot use (a bad or unknown field): (name, message, hint), left out of servers; selecting one
    # is the error (``refusal``), any other command warns about it (docs/contract.md §3)
    unusable: tuple[tuple[str, str, str | None], ...] = ()

    def refusal(self, name: str) -> InvalidConfigError | None:
        """The error that selecting the unusable entry ``name`` is, or None when it is not one (a new instance
        each time: a stored error is never raised twice)."""
        for unusable_name, message, hint in self.unusable:
            if unusable_name == name:
                return InvalidConfigError(message, hint=hint)
        return None


def expand_user_path(path: str, env: Mapping[str, str], cwd: str) -> str | None:
    """The one rule for every path a user gives (``--config``, ``--body @FILE``, ``--registry``, ``--import``,
    ``--events``, a stdio ``command`` or ``cwd``; docs/contract.md §2): ``~`` and ``~/...`` start at the injected
    ``$HOME``, ``~user`` at that user's home, and a relative path is taken from the injected working directory.

    ``None`` when the path starts with ``~`` and HOME is unset or empty: it has no location, and guessing ``/`` or
    the working directory would name another file. The caller says so in its own words.
    """
    if path == "~" or path.startswith("~/"):
        home = env.get("HOME") or ""
        if not home:
            return None
        path = home + path[1:]
    elif path.startswith("~"):
        path = os.path.expanduser(path)
    return os.path.normpath(os.path.join(cwd, path))


def resolve_user_path(path: str, env: Mapping[str, str], cwd: str, *, option: str) -> str:
    """``expand_user_path`` for an option whose file must have a location: a ``~`` path without HOME is a usage
    error naming ``option``."""
    resolved = expand_user_path(path, env, cwd)
    if resolved is None:
        raise UsageError(
            f"{option}: HOME is not set (or is empty), so {path} has no location",
            hint=f"set HOME, or give {option} a full path",
        )
    return resolved


def resolve_config_path(option: str | None, env: Mapping[str, str], cwd: str) -> str:
    """``--config`` if given, else ``$BK_CLI_CONFIG_DIR/mcp.json``, else ``~/.bk-cli/mcp.json`` (docs/contract.md §3).

    Paths follow ``expand_user_path``. With HOME unset or empty a ``~`` path has no location: it is returned
    unexpanded (the only relative result) and ``load_config`` reports it as not found, rather than guessing
    ``/.bk-cli/mcp.json`` or a file relative to the working directory. Help still shows it.
    """
    if option is not None:
        if not option:
            raise UsageError("--config needs a file path")
        path = option
    elif env.get("BK_CLI_CONFIG_DIR"):
        path = os.path.join(env["BK_CLI_CONFIG_DIR"], CONFIG_FILE_NAME)
    else:
        path = "~/.bk-cli/" + CONFIG_FILE_NAME
    resolved = expand_user_path(path, env, cwd)
    return path if resolved is None else resolved


_SHELL_SAFE = frozenset("@%+=:,./-_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def shell_quote(text: str) -> str:
    """``shlex.quote(text)``, without importing re (shlex does): help paths print commands (tests/unit/test_cli.py
    compares the two)."""
    if text and all(ch in _SHELL_SAFE for ch in text):
        return text
    return "'" + text.replace("'", "'\"'\"'") + "'"


def build_server_command(server_name: str, config: str | None = None) -> str:
    """``bkmcp [--config PATH] SERVER`` as a user can paste it, shell-quoted: every hint, help line and example that
    names a command carries the ``--config`` the command was run with (``config``: its resolved path; None when the
    default file was read), so pasting it reads the same file (docs/contract.md §2)."""
    given = f" --config {shell_quote(config)}" if config is not None else ""
    return f"bkmcp{given} {shell_quote(server_name)}"


def load_config(path: str) -> ConfigFile:
    """Read and validate the whole file (syntax and structure of every server; no environment expansion)."""
    if path.startswith("~"):  # resolve_config_path found no HOME to expand it with
        raise ConfigNotFoundError(
            f"config file not found: HOME is not set (or is empty), so {path} has no location",
            hint="set HOME, set BK_CLI_CONFIG_DIR to the folder holding mcp.json, or pass --config with a full path",
        )
    try:
        with open(path, "rb") as handle:
            raw = handle.read()
            mode = os.fstat(handle.fileno()).st_mode
    except FileNotFoundError:
        raise ConfigNotFoundError(
            f"config file not found: {path}",
            hint="create it, pass --config PATH, or set BK_CLI_CONFIG_DIR; bkmcp never falls back to another file. "
            "A minimal file: " + " ".join(line.strip() for line in CONFIG_EXAMPLE_LINES),
        ) from None
    except IsADirectoryError:
        raise InvalidConfigError(
            f"config path is a directory, not a file: {path}",
            hint=f"pass the file itself, e.g. --config {os.path.join(path, CONFIG_FILE_NAME)}",
        ) from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        raise InvalidConfigError(
            f"cannot read config file {path}: {getattr(exc, 'strerror', None) or exc}",
            hint="check the path and its permissions",
        ) from None
    config = parse_config(raw, path)
    return ConfigFile(config.path, config.servers, bool(mode & 0o044), config.invalid_names, config.unusable)


def parse_config(raw: str | bytes, path: str) -> ConfigFile:
    """Parse strict JSON and validate every server entry. Messages name file, server and field, never values."""
    try:
        document = parse_json(raw)
    except JsonInputError as exc:
        raise InvalidConfigError(f"{path}: invalid JSON: {exc}", hint="the file must be strict JSON") from None
    if not isinstance(document, dict):
        raise InvalidConfigError(
            f'{path}: top level must be a JSON object with "mcpServers"',
            hint='write {"mcpServers": {"<name>": {"type": "http", "url": "https://…"}}}',
        )
    # "servers" is VS Code's .vscode/mcp.json layout, read when the file has no "mcpServers"
    key = "mcpServers" if "mcpServers" in document or "servers" not in document else "servers"
    if key not in document:
        raise InvalidConfigError(
            f'{path}: missing top-level "mcpServers"',
            hint='write {"mcpServers": {"<name>": {"type": "http", "url": "https://…"}}}',
        )
    extra = sorted(set(document) - {key} - _EDITOR_TOP_FIELDS)
    if extra:
        shown = ", ".join(repr(safe_name(k)) for k in extra)
        raise InvalidConfigError(f"{path}: unsupported top-level field(s): {shown}")
    entries = document[key]
    if not isinstance(entries, dict):
        raise InvalidConfigError(f'{path}: "{key}" must be an object of named servers')
    servers: dict[str, ServerConfig] = {}
    invalid: list[tuple[str, str]] = []
    unusable: list[tuple[str, str, str | None]] = []
    for name, entry in entries.items():
        problem = check_server_name(name)
        if problem:  # no command line can select it: reported for this entry only, the others stay usable
            invalid.append((name, problem))
            continue
        try:
            servers[name] = parse_server(path, name, entry)
        except InvalidConfigError as exc:  # an error when selected; the file's other servers stay usable
            unusable.append((name, exc.message, exc.hint))
    return ConfigFile(path, servers, invalid_names=tuple(invalid), unusable=tuple(unusable))


def safe_name(name: str) -> str:
    """A config key as diagnostics may show it: up to its first character outside a header token, so a pasted
    ``Authorization: Bearer <token>`` or ``API_KEY=<value>`` key never prints its secret part (A05)."""
    prefix = re.match(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]*", name).group()  # type: ignore[union-attr]
    return name if prefix == name and len(name) <= 64 else prefix[:64] + "…"


def check_server_name(name: str) -> str | None:
    """Why ``name`` cannot be a server name ("the name …"), or None when it can: a name is not empty, does not
    start with ``-`` (it would read as an option) and has no whitespace or control characters."""
    if not name:
        return "the name must not be empty"
    if name.startswith("-"):
        return "the name must not start with '-' (it would read as an option)"
    if any(ch.isspace() for ch in name) or has_control(name):
        return "the name must not contain whitespace or control characters"
    return None


def parse_server(path: str, name: str, entry: Any) -> ServerConfig:
    where = f"{path}: server {name!r}"
    if not isinstance(entry, dict):
        raise InvalidConfigError(f"{where}: entry must be an object")
    kind = entry.get("type")
    if kind is None and "command" in entry:  # the entry every editor writes for a stdio server
        kind = "stdio"
    elif kind is None and "url" in entry:  # the entry Cursor and Claude Code write for a remote server
        kind = "http"
    elif kind in _HTTP_TYPE_ALIASES:
        kind = "http"
    if kind is None:
        raise InvalidConfigError(f'{where}: field "type" is required ("http" or "stdio")')
    if kind not in ("http", "stdio"):
        raise InvalidConfigError(
            f"{where}: unsupported type {kind!r}" if isinstance(kind, str) else f'{where}: "type" must be a string',
            hint='use "http" (Streamable HTTP) or "stdio"',
        )
    allowed = _HTTP_FIELDS if kind == "http" else _STDIO_FIELDS
    unknown = sorted(set(entry) - allowed - _EDITOR_FIELDS - set(EDITOR_IGNORED_FIELDS))
    if unknown:
        raise InvalidConfigError(
            f"{where}: unknown field(s) {', '.join(repr(safe_name(k)) for k in unknown)} for type {kind!r}",
            hint=f"known fields: {', '.join(sorted(allowed))}",
        )
    ignored = tuple(sorted(set(entry) & set(EDITOR_IGNORED_FIELDS)))
    for field_name in ("autoApprove", "alwaysAllow"):
        listed = entry.get(field_name, [])
        if not isinstance(listed, list) or not all(isinstance(t, str) for t in listed):
            raise InvalidConfigError(f'{where}: field "{field_name}" must be an array of tool names')
    disabled = entry.get("disabled", False)
    if not isinstance(disabled, bool):
        raise InvalidConfigError(f'{where}: field "disabled" must be true or false')
    version = entry.get("protocolVersion")
    if version is not None and version not in SUPPORTED_VERSIONS:
        raise InvalidConfigError(f'{where}: field "protocolVersion" must be one of {", ".join(SUPPORTED_VERSIONS)}')
    common: dict[str, Any] = {"name": name, "type": kind, "config_file": path, "protocol_version": version}
    common["ignored"] = ignored
    if kind == "http":
        url, headers = check_url(where, entry.get("url")), _check_headers(where, entry.get("headers"))
        return ServerConfig(**common, url=url, headers=headers, disabled=disabled)
    command = entry.get("command")
    if not isinstance(command, str) or not command.strip():
        raise InvalidConfigError(f'{where}: field "command" must be a non-empty string')
    args = entry.get("args", [])
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise InvalidConfigError(f'{where}: field "args" must be an array of strings')
    env = entry.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise InvalidConfigError(f'{where}: field "env" must be an object of string values')
    for key in env:
        if not (key.isascii() and key.isidentifier()):  # [A-Za-z_][A-Za-z0-9_]*
            raise InvalidConfigError(f'{where}: field "env" has an invalid variable name {safe_name(key)!r}')
    cwd = entry.get("cwd")
    if cwd is not None and (not isinstance(cwd, str) or not cwd):
        raise InvalidConfigError(f'{where}: field "cwd" must be a non-empty string')
    for label, text in (
        ("command", command),
        ("cwd", cwd or ""),
        *(("args", a) for a in args),
        *(("env", v) for v in env.values()),
    ):
        if "\x00" in text:  # no process can be started with it
            raise InvalidConfigError(f'{where}: field "{label}" contains a NUL character')
    return ServerConfig(**common, command=command, args=tuple(args), env=tuple(env.items()), cwd=cwd, disabled=disabled)


def check_url(where: str, url: Any) -> str:
    """Absolute http(s), a host, no user information, no fragment; the URL itself is kept byte for byte."""
    if not isinstance(url, str) or not url:
        raise InvalidConfigError(f'{where}: field "url" is required and must be a string')
    if has_control(url) or " " in url:
        raise InvalidConfigError(f'{where}: field "url" contains whitespace or control characters')
    scheme, separator, rest = url.partition("://")
    if not separator or scheme.lower() not in ("http", "https"):
        raise InvalidConfigError(f'{where}: field "url" must be an absolute http:// or https:// URL')
    authority = rest
    for stop in "/?#":
        authority = authority.split(stop, 1)[0]
    if "@" in authority:
        raise InvalidConfigError(
            f'{where}: field "url" must not contain user information',
            hint='put credentials in "headers", not in the URL',
        )
    if "#" in url:
        raise InvalidConfigError(f'{where}: field "url" must not contain a fragment (#…)')
    host, port = authority, ""
    if authority.startswith("["):  # an IPv6 literal
        end = authority.find("]")
        host, after = authority[1:end], authority[end + 1 :]
        if end < 0 or not host or (after and not after.startswith(":")) or any(c not in _IPV6_CHARS for c in host):
            raise InvalidConfigError(f'{where}: field "url" is not a valid URL')
        port = after[1:]
    elif ":" in authority:
        host, _, port = authority.rpartition(":")
        if ":" in host or "[" in host or "]" in authority:
            raise InvalidConfigError(f'{where}: field "url" is not a valid URL')
    if port and not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise InvalidConfigError(f'{where}: field "url" is not a valid URL')
    if not host:
        raise InvalidConfigError(f'{where}: field "url" has no host')
    if port and int(port) == 0:
        raise InvalidConfigError(f'{where}: field "url" has an invalid port')
    return url


_IPV6_CHARS = frozenset("0123456789abcdefABCDEF:.")


def _check_headers(where: str, headers: Any) -> tuple[tuple[str, str], ...]:
    if headers is None:
        return ()
    if not isinstance(headers, dict):
        raise InvalidConfigError(f'{where}: field "headers" must be an object of strings')
    seen: dict[str, str] = {}
    for name, value in headers.items():
        if not is_token(name):
            # never echo the whole name: a pasted "Authorization: Bearer <token>" key would print the token
            raise InvalidConfigError(
                f"{where}: header name {safe_name(name)!r} is not a valid HTTP header name",
                hint="header names are tokens without spaces, ':' or control characters; values go after them",
            )
        if not isinstance(value, str):
            raise InvalidConfigError(f"{where}: header {name!r} must have a string value")
        if "\r" in value or "\n" in value or "\x00" in value:
            raise InvalidConfigError(f"{where}: header {name!r} contains a line break or NUL")
        lowered = name.lower()
        if lowered in _FORBIDDEN_HEADERS or lowered.startswith("mcp-param-"):
            raise InvalidConfigError(
                f"{where}: header {name!r} is managed by bkmcp and cannot be configured",
                hint='remove it from "headers"',
            )
        if lowered in seen:
            raise InvalidConfigError(
                f"{where}: headers {seen[lowered]!r} and {name!r} are the same header (names ignore case)",
                hint="keep one of them",
            )
        seen[lowered] = name
    return tuple(headers.items())


def expand_env(
    template: str, env: Mapping[str, str], *, where: str, user: Mapping[str, str] | None = None
) -> tuple[str, list[str]]:
    """Expand ``${NAME}`` references once (no recursion, no shell); ``$${`` is a literal ``${``.

    ``user`` (resident mode, contract.md §11.4) also allows ``${user.FIELD}``, taken from that credential; without it
    such a reference is unsupported syntax, as in the CLI.
    Returns the expanded text and the values substituted (so callers can register them as secrets).
    """
    used: list[str] = []

    def replace(match: re.Match[str]) -> str:
        token = match.group(0)
        if token == "$${":
            return "${"
        name = match.group(1)
        if name is None and match.group(2) is not None and user is not None:
            field_name = match.group(2)
            if field_name not in user:
                raise CredentialsMissingError(
                    f"the credential has no field {field_name!r} (needed by {where})",
                    hint=f"add the field {field_name!r} to the credentials of this server in the registry",
                    details={"field": field_name},
                )
            used.append(user[field_name])
            return user[field_name]
        if name is None:
            raise InvalidConfigError(
                f"{where}: unsupported reference syntax: a reference is ${{NAME}} where NAME matches "
                "[A-Za-z_][A-Za-z0-9_]* (ASCII letters, digits and _, not starting with a digit)",
                hint="rename the variable to such a name, or write $${ for a literal ${",
            )
        if name not in env:
            raise MissingEnvironmentVariableError(
                f"environment variable {name} is not set (needed by {where})",
                hint=f"export {name}=… before running bkmcp",
                details={"variable": name},
            )
        used.append(env[name])
        return env[name]

    return ENV_REF.sub(replace, template), used


# ======================================================================================================
# 4. Auth
# ======================================================================================================

_BKAPI_FORMS = (
    frozenset({"bk_app_code", "bk_app_secret", "bk_ticket"}),
    frozenset({"bk_app_code", "bk_app_secret", "bk_token"}),
    frozenset({"access_token"}),
)
_BKAPI_KNOWN = frozenset().union(*_BKAPI_FORMS)


@dataclass
class ResolvedServer:
    """The selected server after environment expansion and credential checks: what transports use."""

    name: str
    type: str
    config_file: str
    url: str | None
    headers: dict[str, str]
    command: str | None
    args: list[str]
    env: dict[str, str]
    cwd: str | None
    protocol_version: str | None
    auth_source: str  # "server_headers" (http) | "server_env" (stdio: credentials in its env) | "none"
    redactor: Redactor = field(default_factory=Redactor)
    inherited_env: dict[str, str] = field(default_factory=dict)  # stdio: the minimal set from bkmcp's environment
    # stdio: a failure quotes the child's output (its last stderr lines, a stray stdout line); False for a child
    # shared by several users (the resident mode's public servers), whose output may hold any user's arguments
    child_output_in_errors: bool = True

    def identity(self, *more: Any) -> str:
        """The one hash of a resolved server: what a connection to it is made of (transport, URL, headers,
        command, args, env, working directory, pinned ``protocolVersion``) plus ``more``, what a caller's
        connections also differ by. The resident mode's fingerprint (``slot_fingerprint``) and the warm session
        key (``warm_session_key``) are both this; each says which ``more`` it adds and why."""
        import hashlib

        made_of = [self.type, self.url, sorted(self.headers.items()), self.command, self.args, sorted(self.env.items())]
        made_of += [self.cwd, self.protocol_version, *more]
        return hashlib.sha256(dump_json(made_of).encode("utf-8", "surrogatepass")).hexdigest()


# What a stdio server inherits from bkmcp's environment (docs/contract.md §9): locating programs, the user, locale, temp
# dirs, the terminal and what Windows needs to start a process. Nothing else (no tokens, no proxies).
STDIO_INHERITED_ENV = (
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "LANG",
    "TMPDIR",
    "TEMP",
    "TMP",
    "SHELL",
    "TERM",
    "SYSTEMROOT",
    "COMSPEC",
    "PATHEXT",
    "WINDIR",
)


def select_inherited_env(env: Mapping[str, str]) -> dict[str, str]:
    """The minimal inherited part of a stdio server's environment (``LC_*`` included); the entry's ``env`` is
    laid over it by the transport."""
    return {name: value for name, value in env.items() if name in STDIO_INHERITED_ENV or name.startswith("LC_")}


def _stdio_path(path: str, env: Mapping[str, str], cwd: str, where: str) -> str:
    resolved = expand_user_path(path, env, cwd)
    if resolved is None:
        raise InvalidConfigError(
            f"{where}: HOME is not set (or is empty), so {path} has no location", hint="set HOME, or write a full path"
        )
    return resolved


def find_header(headers: Iterable[tuple[str, str]], name: str) -> tuple[str, str] | None:
    lowered = name.lower()
    return next(((key, value) for key, value in headers if key.lower() == lowered), None)


def check_auth_conflict(server: ServerConfig) -> None:
    """Both identity headers configured (any case): refuse before anything is expanded or sent (A03)."""
    bearer = find_header(server.headers, "Authorization")
    bkapi = find_header(server.headers, "X-Bkapi-Authorization")
    if bearer and bkapi:
        raise AuthConflictError(
            f"server {server.name!r} in {server.config_file} sets both {bearer[0]!r} and {bkapi[0]!r}",
            hint="keep exactly one identity header for this server; bkmcp never picks one for you",
        )


def check_authorization_value(value: str, *, where: str) -> list[str]:
    """Validate an ``Authorization`` value; returns secret fragments to scrub."""
    if not value.strip():
        raise InvalidConfigError(
            f"{where}: header 'Authorization' is empty",
            hint='write "Bearer <token>", or remove the header for anonymous access',
        )
    scheme, _, credentials = value.strip().partition(" ")
    if scheme.lower() == "bearer" and not credentials.strip():
        raise InvalidConfigError(
            f"{where}: header 'Authorization' has an empty Bearer token",
            hint='put the token after "Bearer ", e.g. "Bearer ${TOKEN}"',
        )
    return [credentials.strip()] if credentials.strip() else []


def check_bkapi_value(value: str, *, where: str) -> list[str]:
    """Validate ``X-Bkapi-Authorization``: app + ticket, app + token, or access_token alone (docs/contract.md §4)."""
    label = f"{where}: header 'X-Bkapi-Authorization'"
    forms = 'expected {"bk_app_code": …, "bk_app_secret": …, "bk_ticket"|"bk_token": …} or {"access_token": …}'
    if not value.strip():
        raise InvalidConfigError(f"{label} is empty", hint=forms)
    try:
        document = parse_json(value)
    except JsonInputError:
        raise InvalidConfigError(f"{label} is not valid JSON", hint=forms) from None
    if not isinstance(document, dict):
        raise InvalidConfigError(f"{label} must be a JSON object", hint=forms)
    unknown = [k for k in document if k not in _BKAPI_KNOWN]
    if unknown:
        raise InvalidConfigError(
            f"{label} has {len(unknown)} unsupported field(s)",
            hint=f"allowed fields: {', '.join(sorted(_BKAPI_KNOWN))}",
        )
    for key, item in document.items():
        if not isinstance(item, str) or not item.strip():
            raise InvalidConfigError(f"{label}: field {key!r} must be a non-empty string")
    if frozenset(document) not in _BKAPI_FORMS:
        raise InvalidConfigError(
            f"{label} has fields {', '.join(sorted(document))}, which is not a supported form",
            hint="use bk_app_code + bk_app_secret + exactly one of bk_ticket/bk_token, or access_token alone",
        )
    return list(document.values())


def resolve_server(
    server: ServerConfig, env: Mapping[str, str], *, user: Mapping[str, str] | None = None, cwd: str | None = None
) -> ResolvedServer:
    """Expand the selected server's ``${VAR}`` references and check its credentials (C04, A03).

    ``user``: the resident mode's chosen credential, for ``${user.FIELD}`` in headers and env (contract.md §11.4).
    ``cwd``: the working directory that a stdio entry's relative ``cwd`` and a ``command`` naming a path start from
    (``expand_user_path``; default: the process's)."""
    check_auth_conflict(server)
    redactor = Redactor()
    where = f"server {server.name!r} in {server.config_file}"
    headers: dict[str, str] = {}
    for name, template in server.headers:
        value, used = expand_env(template, env, where=f"{where}, header {name!r}", user=user)
        if any(ch in value for ch in "\r\n\x00"):  # e.g. a token read from a file with its trailing newline
            raise InvalidConfigError(
                f"{where}: header {name!r} contains a line break or NUL after expansion",
                hint='strip the newline from the variable\'s value (export VAR="$(cat file)" does that)',
            )
        secret = is_secret_name(name)
        if secret:
            if not value.strip():
                raise InvalidConfigError(
                    f"{where}: credential header {name!r} is empty after expansion",
                    hint="set the variable to a real credential; bkmcp never falls back to anonymous access",
                )
            redactor.add(value)
            for fragment in used:
                redactor.add(fragment, whole=False)
        headers[name] = value
    auth_source = "none"
    for name, value in headers.items():
        lowered = name.lower()
        if lowered == "authorization":
            fragments = check_authorization_value(value, where=where)
        elif lowered == "x-bkapi-authorization":
            fragments = check_bkapi_value(value, where=where)
        else:
            fragments = []
        for fragment in fragments:
            redactor.add(fragment, whole=False)
        if is_secret_name(name):
            auth_source = "server_headers"
    args = [expand_env(arg, env, where=f"{where}, args[{i}]")[0] for i, arg in enumerate(server.args)]
    if any("\x00" in arg for arg in args):
        raise InvalidConfigError(f"{where}: an argument contains a NUL character after expansion")
    child_env: dict[str, str] = {}
    for name, template in server.env:
        value, used = expand_env(template, env, where=f"{where}, env {name!r}", user=user)
        if "\x00" in value:
            raise InvalidConfigError(f"{where}: env {name!r} contains a NUL character after expansion")
        child_env[name] = value
        if is_secret_name(name) or used:
            redactor.add(value, whole=is_secret_name(name))
    # a stdio server has no headers: credentials it gets travel in its environment (docs/contract.md §7)
    if auth_source == "none" and any(map(is_secret_name, child_env)):
        auth_source = "server_env"
    command, workdir = server.command, server.cwd
    if server.type == "stdio":
        base = os.getcwd() if cwd is None else cwd
        if workdir is not None:
            workdir = _stdio_path(workdir, env, base, f'{where}: field "cwd"')
        if command and (os.sep in command or (os.altsep and os.altsep in command)):
            command = _stdio_path(command, env, workdir or base, f'{where}: field "command"')
    return ResolvedServer(
        name=server.name,
        type=server.type,
        config_file=server.config_file,
        url=server.url,
        headers=headers,
        command=command,
        args=args,
        env=child_env,
        cwd=workdir,
        protocol_version=server.protocol_version,
        auth_source=auth_source,
        redactor=redactor,
        inherited_env=select_inherited_env(env) if server.type == "stdio" else {},
    )


# ======================================================================================================
# 5. Protocol core (sans-IO) — deferred in the pyz
# ======================================================================================================

# Everything here is pure: it turns bytes into events and dicts into wire messages and back, and decides
# what an answer means. It imports neither httpx nor sockets nor subprocess (design.md, Code style: the h11 model); the
# transports of section 6 own the I/O and drive these functions message by message.


# -- 5.1 eras and their rules (EraRules, era_rules) --------------------------------------------------------------------

LEGACY_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
LATEST_LEGACY_VERSION = "2025-11-25"
LATEST_MODERN_VERSION = "2026-07-28"
CLIENT_INFO = {"name": "bkmcp", "version": __version__}
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"

MAX_PAGES = 1000
MAX_TOOLS = 100_000


@dataclass(frozen=True)
class EraRules:
    """What one protocol version changes on the wire (docs/protocol.md §0). Flows read this table, not ifs."""

    version: str
    era: str  # "legacy" | "modern"
    handshake: bool  # initialize + notifications/initialized
    version_header: bool  # MCP-Protocol-Version on requests after the handshake (every request when modern)
    sessions: bool  # Mcp-Session-Id issued by initialize, DELETE at close
    request_meta: bool  # params._meta protocolVersion / clientCapabilities / clientInfo on every request
    method_headers: bool  # Mcp-Method, Mcp-Name, Mcp-Param-*
    sse_resumption: bool  # GET + Last-Event-ID when a POST's stream closes early
    cancel_notification: bool  # Ctrl-C sends notifications/cancelled (modern HTTP closes the stream)
    # Mcp-Param-* come from inputSchema x-mcp-header: a tool whose declaration is invalid is excluded (§5)
    header_exclusion: bool
    list_ttl: bool  # a tools/list page's ttlMs says how long it may be kept (a warm session keeps it: contract §14)


def _era(version: str, era: str = "legacy", **changes: bool) -> EraRules:
    """A row of the table: the rules of 2025-11-25 with ``changes``."""
    base = {"handshake": True, "version_header": True, "sessions": True, "request_meta": False}
    base.update(method_headers=False, sse_resumption=True, cancel_notification=True, header_exclusion=False)
    base.update(list_ttl=False)
    return EraRules(version=version, era=era, **{**base, **changes})


ERA_TABLE: dict[str, EraRules] = {
    # 2024-11-05's messages are a subset of 2025-03-26's (no batches, annotations, audio, progress message); its
    # HTTP+SSE transport is not spoken: a server that chose it over Streamable HTTP or stdio gets these rules
    "2024-11-05": _era("2024-11-05", version_header=False),
    "2025-03-26": _era("2025-03-26", version_header=False),
    "2025-06-18": _era("2025-06-18"),
    "2025-11-25": _era("2025-11-25"),
    "2026-07-28": _era(
        "2026-07-28",
        era="modern",
        handshake=False,
        sessions=False,
        request_meta=True,
        method_headers=True,
        sse_resumption=False,
        cancel_notification=False,
        header_exclusion=True,
        list_ttl=True,
    ),
}


def era_rules(version: str) -> EraRules:
    try:
        return ERA_TABLE[version]
    except KeyError:
        raise ProtocolError(
            f"protocol version {version!r} is not supported by bkmcp (supported: {', '.join(SUPPORTED_VERSIONS)})"
        ) from None


# -- 5.2 JSON-RPC framing ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Message:
    """One decoded JSON-RPC message. ``kind``: request | notification | result | error."""

    kind: str
    id: Any = None
    method: str | None = None
    params: Any = None
    result: Any = None
    error: dict[str, Any] | None = None


def _is_rpc_id(value: Any) -> bool:
    return isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool))


def same_id(a: Any, b: Any) -> bool:
    """JSON-RPC ids match only with the same type and value (``1`` is not ``"1"``, ``True`` is no id)."""
    return _is_rpc_id(a) and _is_rpc_id(b) and type(a) is type(b) and a == b


def parse_message(value: Any) -> Message:
    """Classify one decoded JSON value as a JSON-RPC 2.0 message; ``ProtocolError`` says what is wrong."""
    if not isinstance(value, dict):
        raise ProtocolError(f"the server sent a JSON-RPC message that is {json_kind(value)}, not an object")
    if value.get("jsonrpc") != "2.0":
        raise ProtocolError('the server sent a message without "jsonrpc": "2.0"')
    has_id = "id" in value
    msg_id = value.get("id")
    if "method" in value:
        method = value["method"]
        if not isinstance(method, str) or not method:
            raise ProtocolError('the server sent a message whose "method" is not a non-empty string')
        params = value.get("params")
        if params is not None and not isinstance(params, (dict, list)):
            raise ProtocolError(f"the server sent {method!r} with params that are {json_kind(params)}")
        if has_id and msg_id is not None:
            if not _is_rpc_id(msg_id):
                raise ProtocolError(f"the server sent request {method!r} with an invalid id ({json_kind(msg_id)})")
            return Message("request", id=msg_id, method=method, params=params)
        return Message("notification", method=method, params=params)
    if "result" in value and "error" not in value:
        if not _is_rpc_id(msg_id):
            raise ProtocolError(f"the server sent a result with an invalid id ({json_kind(msg_id)})")
        return Message("result", id=msg_id, result=value["result"])
    if "error" in value and "result" not in value:
        error = value["error"]
        if msg_id is not None and not _is_rpc_id(msg_id):
            raise ProtocolError(f"the server sent an error with an invalid id ({json_kind(msg_id)})")
        if not isinstance(error, dict):
            raise ProtocolError(f"the server sent a JSON-RPC error that is {json_kind(error)}, not an object")
        code = error.get("code")
        if not isinstance(code, int) or isinstance(code, bool):
            raise ProtocolError("the server sent a JSON-RPC error without an integer code")
        if not isinstance(error.get("message"), str):
            raise ProtocolError(f"the server sent JSON-RPC error {code} without a message string")
        return Message("error", id=msg_id, error=error)
    raise ProtocolError("the server sent a JSON object that is neither a request, a notification nor a response")


def decode_messages(text: str | bytes) -> list[Message]:
    """A response body or SSE data: one message, or (2025-03-26) a batch array of them."""
    try:
        value = parse_json(text, strict_keys=False)
    except JsonInputError as exc:
        if exc.too_deep:  # not the server's fault alone: say whose limit it is
            deep = {"reason": "nested_too_deep"}
            raise ProtocolError(f"the server sent JSON {too_deep_words()}", details=deep) from None
        raise ProtocolError(f"the server sent invalid JSON: {exc}") from None
    if isinstance(value, list):
        if not value:
            raise ProtocolError("the server sent an empty JSON-RPC batch")
        return [parse_message(item) for item in value]
    return [parse_message(value)]


_ENVELOPE_TOKEN = lazy_re(r'"(?:[^"\\]|\\.)*"|[{}\[\]:,]|[^\s"{}\[\]:,]+')
_ENVELOPE_TOKENS = 4_000_000  # tokens of an unreadable line looked at to find its id (the rest is never the envelope)
_TRAILING_ID = lazy_re(r'"id"\s*:\s*(-?[0-9]+|"(?:[^"\\]|\\.)*")\s*}\s*$')


def parse_rpc_envelope(text: str) -> tuple[bool, Any]:
    """What can be told of a line that is too deep (or too long: ``text`` is then its head) to parse: whether it is
    a JSON-RPC response — an object whose top level has ``"jsonrpc"`` and no ``"method"`` — and the id at its top
    level (None when there is none, or it lies past ``_ENVELOPE_TOKENS``). A scan of the top level only: no
    recursion."""
    if not text.lstrip(JSON_SPACE).startswith("{"):
        return False, None
    depth, expect_key, key, value_of = 0, False, None, None
    keys: set[str] = set()
    found = None
    for count, match in enumerate(_ENVELOPE_TOKEN.finditer(text)):
        token = match.group()
        if count >= _ENVELOPE_TOKENS:
            break
        if token in "{[":
            depth += 1
            expect_key, value_of = depth == 1, None
        elif token in "}]":
            depth -= 1
            if depth <= 0:
                break
        elif depth != 1:
            continue
        elif token == ",":
            expect_key = True
        elif token == ":":
            value_of, key = key, None
        elif expect_key and token.startswith('"'):
            key, expect_key = token[1:-1], False
            keys.add(key)
        elif value_of == "id":
            try:
                found = parse_json(token)
            except JsonInputError:
                found = None
            value_of = None
    shaped = "jsonrpc" in keys and "method" not in keys
    return shaped, found if shaped and _is_rpc_id(found) else None


def parse_trailing_id(text: str) -> Any:
    """The id a too-long line's last bytes end with (``…,"id":4}``: the TypeScript SDK writes it last), or None."""
    match = _TRAILING_ID.search(text)
    if match is None:
        return None
    try:
        found = parse_json(match.group(1))
    except JsonInputError:
        return None
    return found if _is_rpc_id(found) else None


def json_kind(value: Any) -> str:
    """``json_type`` with its article, for messages: "an object", "a number", "null"."""
    kind = json_type(value)
    return kind if kind == "null" else ("an " if kind[0] in "aeiou" else "a ") + kind


# -- 5.3 SSE decoding --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SseEvent:
    event: str
    data: str
    id: str | None = None


_SSE_EOL = lazy_re(r"\r\n|\r|\n")
_RETRY_MAX_MS = 600_000


class SseDecoder:
    """Incremental ``text/event-stream`` decoder (WHATWG rules) fed with chunks as they arrive.

    LF, CRLF and CR line ends (a CRLF split across chunks counts once); ``:`` comments ignored; ``data``
    lines joined with ``\\n``; events with empty data are not dispatched (MCP priming events) but their ``id``
    still becomes ``last_event_id``; ``retry`` kept in ``retry_ms``. Each input character is scanned once and
    a long line is kept as a list of pieces joined once, so a 50 MB event costs linear time and memory.
    """

    def __init__(self) -> None:
        import codecs

        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._pieces: list[str] = []
        self._skip_lf = False
        self._started = False
        self._data: list[str] = []
        self._event = ""
        self._id_buffer: str | None = None
        self.last_event_id: str | None = None
        self.retry_ms: int | None = None

    def feed(self, chunk: bytes | str) -> list[SseEvent]:
        text = self._utf8.decode(chunk) if isinstance(chunk, bytes) else chunk
        if not text:
            return []
        if not self._started:
            self._started = True
            if text.startswith("\ufeff"):
                text = text[1:]
        events: list[SseEvent] = []
        pos = 0
        if self._skip_lf and text:
            self._skip_lf = False
            if text[0] == "\n":
                pos = 1
        for match in _SSE_EOL.finditer(text, pos):
            start = match.start()
            if self._pieces:
                self._pieces.append(text[pos:start])
                pieces, self._pieces = self._pieces, []
                if pieces[0].startswith("data:") and len(pieces[0]) > 5:  # strip "data:" before the one join
                    head = pieces[0][5:]
                    pieces[0] = head[1:] if head[:1] == " " else head
                    self._data.append("".join(pieces))
                    line = None
                else:
                    line = "".join(pieces)
                del pieces
            else:
                line = text[pos:start]
            pos = match.end()
            if match.group() == "\r" and pos == len(text):
                self._skip_lf = True  # a "\n" opening the next chunk belongs to this line end
            if line is not None:
                self._line(line, events)
        if pos < len(text):
            self._pieces.append(text[pos:])
        return events

    def close(self) -> list[SseEvent]:
        """End of stream: an unterminated event is discarded (WHATWG), nothing else to flush."""
        tail = self._utf8.decode(b"", final=True)
        events = self.feed(tail) if tail else []
        self._pieces = []
        self._data = []
        return events

    def _line(self, line: str, events: list[SseEvent]) -> None:
        if not line:
            self._dispatch(events)
            return
        if line[0] == ":":
            return
        name, colon, value = line.partition(":")
        if colon and value[:1] == " ":
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\x00" not in value:
                self._id_buffer = value
        elif name == "retry":
            if value.isascii() and value.isdigit():
                self.retry_ms = min(int(value[:9]), _RETRY_MAX_MS)

    def _dispatch(self, events: list[SseEvent]) -> None:
        self.last_event_id = self._id_buffer
        data = self._data[0] if len(self._data) == 1 else "\n".join(self._data)
        if data:  # WHATWG: an empty data buffer (no data line, or one empty data line) is not dispatched
            events.append(SseEvent(self._event or "message", data, self._id_buffer))
        self._data = []
        self._event = ""


# -- 5.4 request building ----------------------------------------------------------------------------------------------


def build_request(
    request_id: Any,
    method: str,
    params: dict[str, Any] | None,
    rules: EraRules,
    capabilities: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A JSON-RPC request; modern requests carry the per-request ``_meta`` keys (docs/protocol.md §3.1), the client
    capabilities among them (``capabilities``: what this operation can answer, docs/contract.md §5)."""
    return {"jsonrpc": "2.0", "id": request_id, **build_notification(method, params, rules, capabilities)}


def build_notification(
    method: str, params: dict[str, Any] | None, rules: EraRules, capabilities: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    params = _with_meta(params, rules, capabilities)
    if params is not None:
        message["params"] = params
    return message


def build_response(request_id: Any, *, result: Any = None, error: dict[str, Any] | None = None) -> dict[str, Any]:
    if error is not None:
        return {"jsonrpc": "2.0", "id": request_id, "error": error}
    return {"jsonrpc": "2.0", "id": request_id, "result": result if result is not None else {}}


def merge_capabilities(declared: Mapping[str, Any] | None, asked: Any) -> dict[str, Any]:
    """The client capabilities of one modern request: what the operation declares (elicitation when it can answer)
    with what the request itself adds (the tasks extension, ``call_tool``), ``extensions`` merged key by key."""
    merged = dict(declared or {})
    if isinstance(asked, Mapping):
        for key, value in asked.items():
            both = isinstance(merged.get(key), Mapping) and isinstance(value, Mapping)
            merged[key] = {**merged[key], **value} if key == "extensions" and both else value
    return merged


def _with_meta(
    params: dict[str, Any] | None, rules: EraRules, capabilities: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    if not rules.request_meta:
        return params
    params = dict(params or {})
    meta = dict(params.get("_meta") or {})
    meta[META_PROTOCOL_VERSION] = rules.version
    meta[META_CLIENT_CAPABILITIES] = merge_capabilities(capabilities, meta.get(META_CLIENT_CAPABILITIES))
    meta[META_CLIENT_INFO] = dict(CLIENT_INFO)
    params["_meta"] = meta
    return params


def build_initialize_params(version: str, capabilities: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"protocolVersion": version, "capabilities": dict(capabilities or {}), "clientInfo": dict(CLIENT_INFO)}


# What bkmcp declares when an operation can answer a server's questions (docs/contract.md §5): elicitation in form
# mode, and URL mode only when a person sees the terminal. Never sampling or roots (deprecated in 2026-07-28).
ELICITATION_FORM: dict[str, Any] = {"elicitation": {"form": {}}}
ELICITATION_FORM_AND_URL: dict[str, Any] = {"elicitation": {"form": {}, "url": {}}}


# SEP-2640 (modelcontextprotocol/modelcontextprotocol@01b12e05, seps/2640-skills-extension.md): the extension a skill
# command's session declares, and only a skill command's (--skills, --skill).
SKILLS_EXTENSION = "io.modelcontextprotocol/skills"
SKILLS_CAPABILITIES: dict[str, Any] = {"extensions": {SKILLS_EXTENSION: {}}}


_SENTINEL_PREFIX = "=?base64?"
_SENTINEL_SUFFIX = "?="


def encode_header_value(value: Any) -> str | None:
    """A value for ``Mcp-Name`` / ``Mcp-Param-*``; None means "omit the header" (null, absent, non-scalar).

    Plain visible ASCII without surrounding whitespace goes as is; anything else, or a value that itself looks
    like the sentinel, is sent as ``=?base64?<base64 of UTF-8>?=`` (2026-07-28 streamable-http §Request Metadata).
    """
    if value is None:
        return None
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    plain = all(" " <= ch <= "~" for ch in text) and text == text.strip()
    looks_encoded = text.startswith("=?") and text.endswith(_SENTINEL_SUFFIX)
    if plain and not looks_encoded:
        return text
    import base64

    return _SENTINEL_PREFIX + base64.b64encode(text.encode("utf-8")).decode("ascii") + _SENTINEL_SUFFIX


def build_param_headers(tool: Mapping[str, Any] | None, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``Mcp-Param-{Name}`` headers for the arguments whose property declares ``x-mcp-header``.

    Only valid declarations count (``scan_header_declarations``, the rule that also excludes tools); a nested
    declaration (``properties.a.properties.b``) takes the value at that path of the arguments. An absent or
    ``null`` value, or one that is not a string/integer/boolean, sends no header.
    """
    schema = tool.get("inputSchema") if isinstance(tool, Mapping) else None
    headers: list[tuple[str, str]] = []
    for path, name in scan_header_declarations(schema)[0]:
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, Mapping) else None
        encoded = encode_header_value(value)
        if encoded is not None:
            headers.append((f"Mcp-Param-{name}", encoded))
    return headers


# The param a modern request's ``Mcp-Name`` header carries; the tasks extension routes by task id (ext-tasks
# specification/draft/tasks.md, "Streamable HTTP: Routing Headers").
_NAME_HEADER_PARAMS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}


def build_headers(
    rules: EraRules | None,
    *,
    configured: Mapping[str, str],
    message: Mapping[str, Any] | None = None,
    session_id: str | None = None,
    extra: Iterable[tuple[str, str]] = (),
    accept: str = "application/json, text/event-stream",
) -> list[tuple[str, str]]:
    """Headers of one HTTP request: the configured ones (identical on every request), then the managed ones.

    ``rules`` is None for the legacy ``initialize`` (no version negotiated yet, so no version header).
    """
    headers = list(configured.items())
    headers.append(("Accept", accept))
    if message is not None:
        headers.append(("Content-Type", "application/json"))
    if rules is not None and rules.version_header:
        headers.append(("MCP-Protocol-Version", rules.version))
    if session_id is not None and (rules is None or rules.sessions):
        headers.append(("Mcp-Session-Id", session_id))
    if rules is not None and rules.method_headers and message is not None and "method" in message:
        method = message["method"]
        headers.append(("Mcp-Method", method))
        params = message.get("params") or {}
        name_key = _NAME_HEADER_PARAMS.get(method)
        if name_key and isinstance(params, Mapping):
            encoded = encode_header_value(params.get(name_key))
            if encoded is not None:
                headers.append(("Mcp-Name", encoded))
        headers.extend(extra)
    return headers


# -- 5.5 answers: era evidence, results, errors ------------------------------------------------------------------------


def classify_discover(status: int, message: Message | None, requested: str) -> tuple[str, Any]:
    """What a ``server/discover`` probe's answer says about the server's era (docs/contract.md §5).

    Returns ``("modern", version)``, ``("retry", version)`` (``-32022`` naming another modern version we
    speak), ``("legacy", None)`` or ``("incompatible", supported)``. 401/403, redirects, timeouts and
    connection failures never reach this function: the transport raises them (they are no era evidence).
    """
    if message is not None and message.kind == "result" and 200 <= status < 300:
        result = message.result if isinstance(message.result, dict) else {}
        offered = result.get("supportedVersions")
        if isinstance(offered, list):
            mutual = [v for v in MODERN_VERSIONS if v in offered]
            if mutual:
                return "modern", (requested if requested in mutual else mutual[-1])
        return "legacy", None  # e.g. a dual-era server that lists no modern version, or any stub result
    if message is not None and message.kind == "error" and message.error is not None:
        code = message.error.get("code")
        data = message.error.get("data")
        supported = data.get("supported") if isinstance(data, dict) else None
        if code == -32022 and isinstance(supported, list) and all(isinstance(v, str) for v in supported):
            modern = [v for v in MODERN_VERSIONS if v in supported and v != requested]
            if modern:
                return "retry", modern[-1]
            if requested in supported:
                return "modern", requested
            if any(v in LEGACY_VERSIONS for v in supported):
                return "legacy", None
            return "incompatible", list(supported)
    # HTTP 404 + -32601 is how a modern server refuses a method it lacks, but every modern server implements
    # server/discover, and legacy servers answer it so too (n8n-mcp): legacy, unless initialize is refused the
    # same way (``Negotiation.after_initialize_failed``)
    return "legacy", None


_MODERN_ERROR_CODES = (-32022, -32021, -32020)  # unsupported version, missing capability, missing header (2026-07-28)


def is_method_unknown(error: BkmcpError) -> bool:
    """HTTP 404 with a ``-32601`` body: how a modern HTTP server refuses a method it does not implement."""
    message = error.http_message
    rpc = message.error if message is not None and message.kind == "error" else None
    return error.http_status == 404 and rpc is not None and rpc.get("code") == -32601


def is_legacy_refusal(error: BkmcpError) -> bool:
    """An error that reads like a legacy server refusing a request sent outside a session (docs/contract.md §5):
    its JSON-RPC message (else, for HTTP 400/404, the body) speaks of a session or of ``initialize`` ("No valid
    session ID provided and not an initialize request", "Server not initialized", "Missing session ID"), and it is
    no modern error (``-32022``, ``-32021``, ``-32020``)."""
    if not isinstance(error, RemoteError) or isinstance(error, (AuthRequiredError, PermissionDeniedError)):
        return False
    rpc = error.details.get("rpc_error")
    if isinstance(rpc, dict):
        if rpc.get("code") in _MODERN_ERROR_CODES:
            return False
        text = str(rpc.get("message", ""))
    elif error.http_status in (400, 404):
        text = error.message
    else:
        return False
    text = text.lower()
    return "session" in text or "initializ" in text or "initialis" in text


def check_initialize_result(result: Any, offered: str) -> str:
    """The version a legacy server chose; ``ProtocolError`` when bkmcp does not speak it."""
    if not isinstance(result, dict):
        raise ProtocolError(f"initialize returned {json_kind(result)}, not an InitializeResult object")
    version = result.get("protocolVersion")
    if not isinstance(version, str):
        raise ProtocolError("initialize result has no protocolVersion string")
    if version not in LEGACY_VERSIONS:
        raise ProtocolError(
            f"the server chose protocol version {version!r}; bkmcp offered {offered!r} and speaks "
            f"{', '.join(SUPPORTED_VERSIONS)}",
            hint=f"use a release of the server that speaks one of {', '.join(SUPPORTED_VERSIONS)}",
            details={"server_version": version, "client_versions": list(SUPPORTED_VERSIONS)},
        )
    return version


def rpc_error_exception(method: str, error: Mapping[str, Any]) -> RemoteError:
    """A JSON-RPC error answering ``method``, as the error bkmcp reports (rpc code/message/data kept)."""
    code = error.get("code")
    text = clip_text(str(error.get("message", "")), 500)
    data = error.get("data")
    rpc = {"code": code, "message": text}
    if data is not None:
        rpc["data"] = data
    if code == -32042:  # 2025-11-25 URLElicitationRequired
        elicitations = data.get("elicitations") if isinstance(data, dict) else None
        urls = [
            e["url"]
            for e in (elicitations if isinstance(elicitations, list) else [])
            if isinstance(e, dict) and isinstance(e.get("url"), str)
        ]
        return CapabilityUnsupportedError(
            f"{method}: the server requires URL elicitation, which bkmcp does not support ({text})",
            hint="open the URL(s) yourself if you trust them; bkmcp never answers elicitation interactively",
            details={"capability": "elicitation.url", "urls": urls, "rpc_error": rpc},
        )
    if code == -32021:  # 2026-07-28 MissingRequiredClientCapability
        required = data.get("requiredCapabilities") if isinstance(data, dict) else None
        return CapabilityUnsupportedError(
            f"{method}: the server requires client capabilities bkmcp does not have ({text})",
            details={"capability": "client_capabilities", "required": required, "rpc_error": rpc},
        )
    return ProtocolError(
        f"the server answered {method} with JSON-RPC error {code}: {text}",
        details={"rpc_error": rpc},
    )


def check_result(method: str, message: Message, *, task: bool = False) -> dict[str, Any]:
    """The result of ``method`` if it is one bkmcp can report as complete; otherwise the error to raise.

    ``resultType`` absent/``complete`` is a result; ``input_required``, ``task`` (and legacy ``{"task": …}``)
    need capabilities bkmcp lacks (raw result kept in ``data``) — unless ``task``: a call sent as a task may be
    answered with one (returned as is; ``parse_created_task`` reads it); anything else is a protocol error.
    """
    if message.kind == "error":
        raise rpc_error_exception(method, message.error or {})
    result = message.result
    if not isinstance(result, dict):
        raise ProtocolError(
            f"{method} returned {json_kind(result)} instead of a result object", data={"result": result}
        )
    result_type = result.get("resultType", "complete")
    if result_type == "input_required":
        requests = result.get("inputRequests")
        wanted = (
            sorted({str(r.get("method")) for r in requests.values() if isinstance(r, dict)})
            if isinstance(requests, dict)
            else []
        )
        raise CapabilityUnsupportedError(
            f"{method}: the server needs input from the client ({', '.join(wanted) or 'requestState only'}), "
            "which bkmcp does not support",
            hint="bkmcp declares no elicitation/sampling/roots capability and never answers interactively",
            details={"result_type": "input_required", "input_requests": wanted},
            data={"result": result},
        )
    if result_type == "task" or (
        method == "tools/call" and isinstance(result.get("task"), dict) and "content" not in result
    ):
        if task:
            return result
        created = result.get("task") if result_type != "task" else result
        task_id = created.get("taskId") if isinstance(created, dict) else None
        raise CapabilityUnsupportedError(
            f"{method}: the server answered with a task{f' ({task_id})' if task_id else ''}; bkmcp does not "
            "support tasks and never polls them",
            hint="the work may continue on the server; do not re-run blindly",
            details={"result_type": "task", "task_id": task_id},
            data={"result": result},
        )
    if result_type != "complete":
        raise ProtocolError(
            f"{method} returned an unknown resultType {clip_text(repr(result_type), 80)}", data={"result": result}
        )
    if method == "tools/call":
        if not isinstance(result.get("content"), list):
            raise ProtocolError(
                "tools/call result has no content array (malformed CallToolResult)", data={"result": result}
            )
        if "isError" in result and not isinstance(result["isError"], bool):
            raise ProtocolError("tools/call result has a non-boolean isError", data={"result": result})
    elif method in LISTINGS:
        listing = LISTINGS[method]
        items = result.get(listing.key)
        if not isinstance(items, list):
            raise ProtocolError(f"{method} result has no {listing.key} array")
        for index, item in enumerate(items):
            if not isinstance(item, dict) or not isinstance(item.get(listing.id_key), str):
                raise ProtocolError(
                    f"{method} entry {index} is not a {listing.noun} object with a string {listing.id_key}"
                )
        cursor = result.get("nextCursor")
        if cursor is not None and not isinstance(cursor, str):
            raise ProtocolError(f"{method} nextCursor is not a string")
    elif method in ("resources/read", "prompts/get"):
        key = "contents" if method == "resources/read" else "messages"
        if not isinstance(result.get(key), list):
            raise ProtocolError(f"{method} result has no {key} array", data={"result": result})
    elif method == "completion/complete":
        completion = result.get("completion")
        if not isinstance(completion, dict) or not isinstance(completion.get("values"), list):
            raise ProtocolError("completion/complete result has no completion.values array", data={"result": result})
    return result


@dataclass(frozen=True)
class InputRound:
    """One 2026-07-28 ``InputRequiredResult`` (SEP-2322, docs/protocol.md): the server's questions by key, and the
    opaque ``requestState`` the retry echoes exactly (None: the retry carries none)."""

    requests: dict[str, dict[str, Any]]
    state: str | None


MAX_INPUT_REQUESTS = 32  # questions one round may ask; more is a protocol error, not a form to fill


def parse_input_round(method: str, result: Mapping[str, Any]) -> InputRound:
    """An ``input_required`` result read: ``inputRequests`` an object of request objects (each with a string
    ``method``), ``requestState`` a string, at least one of the two; anything else is ``mcp_protocol_error``."""
    requests, state = result.get("inputRequests"), result.get("requestState")

    def malformed(why: str) -> ProtocolError:
        return ProtocolError(
            f"{method}: the server's input_required result is malformed: {why}", data={"result": result}
        )

    if requests is None and state is None:
        raise malformed("it has neither inputRequests nor requestState")
    if state is not None and not isinstance(state, str):
        raise malformed("requestState is not a string")
    if requests is not None:
        if not isinstance(requests, dict):
            raise malformed("inputRequests is not an object")
        if len(requests) > MAX_INPUT_REQUESTS:
            raise malformed(f"it asks {len(requests)} questions at once (at most {MAX_INPUT_REQUESTS})")
        for key, request in requests.items():
            if not isinstance(request, dict) or not isinstance(request.get("method"), str):
                raise malformed(f"inputRequests[{clip_text(repr(key), 60)}] is not a request with a method")
    return InputRound(dict(requests or {}), state)


@dataclass(frozen=True)
class Listing:
    """A paginated list method (docs/contract.md §5): where its items are, what names one, what it lists."""

    method: str
    key: str  # the result's array
    id_key: str  # the field that names an item (two items with one name: a protocol error)
    noun: str  # "tool": "tool_count", "tools_seen", "tool discovery is incomplete"


LISTINGS = {
    "tools/list": Listing("tools/list", "tools", "name", "tool"),
    "resources/list": Listing("resources/list", "resources", "uri", "resource"),
    "resources/templates/list": Listing("resources/templates/list", "resourceTemplates", "uriTemplate", "template"),
    "prompts/list": Listing("prompts/list", "prompts", "name", "prompt"),
    "tasks/list": Listing("tasks/list", "tasks", "taskId", "task"),  # 2025-11-25 core only
    "skills/list": Listing("skills/list", "skills", "uri", "skill"),  # SEP-2640: a name is a label, the URI is unique
}


# The kept catalogues each list_changed notification makes stale (docs/contract.md §11.5, §14): a resource list
# change covers the templates too (both belong to the ``resources`` capability).
LIST_CHANGED = {
    "notifications/tools/list_changed": ("tools/list",),
    "notifications/resources/list_changed": ("resources/list", "resources/templates/list"),
    "notifications/prompts/list_changed": ("prompts/list",),
}


def parse_ttl_ms(result: Mapping[str, Any]) -> int:
    """How long a list result may be considered fresh, in ms (2026-07-28 ``ttlMs``): a non-negative integer; absent
    or anything else is 0, immediately stale (a caching hint is never worth failing a command for)."""
    ttl = result.get("ttlMs")
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl < 0:
        return 0
    return ttl


def parse_www_authenticate(value: str) -> dict[str, str]:
    """``Bearer resource_metadata="…", scope="…", error="…"`` -> its params (plus ``scheme``)."""
    out: dict[str, str] = {}
    value = value.strip()
    scheme = re.match(r"^([A-Za-z][A-Za-z0-9!#$%&'*+.^_`|~-]*)(?:\s+|$)", value)
    if scheme and "=" not in scheme.group(1):
        out["scheme"] = scheme.group(1)
        value = value[scheme.end() :]
    for match in re.finditer(r'([A-Za-z0-9_.-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s,]*))', value):
        key = match.group(1).lower()
        raw = match.group(2) if match.group(2) is not None else match.group(3)
        out.setdefault(key, re.sub(r"\\(.)", r"\1", raw))
    return out


def strip_url_credentials(url: str) -> str:
    """A URL safe to print: no userinfo, no query, no fragment."""
    from urllib.parse import urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{host}:{parts.port}" if parts.port else host
    except ValueError:
        return "(unparsable location)"
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


# -- 5.6 the session core: ids, pending requests, the one matching rule, era and session state -------------------------
# One object per MCP session, like h11's Connection: the I/O side (section 7) hands it every message that
# arrives and sends what it returns; it never touches a socket, a process, a clock or a thread. Callers that
# share a session between threads serialise their calls into it (section 7 holds a lock around it).


@dataclass(frozen=True)
class Answered:
    """The response (result or error) to request ``request_id``, matched by the session core."""

    request_id: Any
    message: Message


@dataclass(frozen=True)
class Notified:
    """A server notification (progress, log, list_changed, …)."""

    message: Message
    related: Any = None  # the request whose stream carried it (HTTP), or None


@dataclass(frozen=True)
class Reply:
    """A message the client must send now (the answer to a server request)."""

    message: dict[str, Any]


@dataclass(frozen=True)
class Asked:
    """A legacy server's ``elicitation/create`` request: the I/O side answers it (docs/contract.md §5)."""

    message: Message
    related: Any = None


@dataclass(frozen=True)
class Declined:
    """A server -> client request bkmcp answered with -32601 (it declares no client capabilities)."""

    method: str
    related: Any = None


@dataclass(frozen=True)
class Stray:
    """A response that answers no request in flight: ``why`` is ``duplicate`` (a second answer for an id already
    answered), ``late`` (for a request that ended without one: a timeout, a cancellation), ``unknown`` (an id
    never sent) or ``null_id`` (an error with a null id that no response stream carried)."""

    message: Message
    why: str
    related: Any = None

    @property
    def duplicate(self) -> bool:
        return self.why == "duplicate"


@dataclass(frozen=True)
class Unreadable:
    """A line that is a JSON-RPC answer to ``request_id`` (its envelope says so) but cannot be parsed: ``why`` says
    what is wrong (nested too deep, too long), ``reason`` is the stable ``details.reason``."""

    request_id: Any
    why: str
    reason: str


def id_key(request_id: Any) -> tuple[type, Any]:
    return (type(request_id), request_id)  # JSON-RPC ids match only with the same type and value (same_id)


_ANSWERED_KEPT = 4096  # recently answered ids remembered to recognise a second answer for one id


def random_first_id() -> int:
    """A session's first request id when nothing but the id ties an answer to its request (stdio, whose stdout a
    server may also print fetched text on: docs/contract.md §9): a random integer, so no line of that text can
    guess it; the ids then count up from it. Below 2**31 - 2**24 with room to count: servers keep integer ids in
    an i32 (rmcp before i64, LSP-style types) or a double; every one of them reads it exactly."""
    return 1 + int.from_bytes(os.urandom(4), "big") % (2**31 - 2**24)


class ClientSession:
    """Sans-IO state of one MCP client session (contract.md §5): request ids, the table of requests in flight, the rule
    that matches responses to them, and the negotiated era (version, session id, capabilities, server info).

    ``start_request`` registers a request and returns its message; ``receive`` takes one decoded message and
    returns events (``Answered``, ``Notified``, ``Reply``, ``Declined``, ``Stray``); ``forget`` drops a request
    that ended without an answer (timeout, cancellation, broken transport). The matching rule, in one place:
      - a result or error whose id is in flight answers that request, once; a second answer for an id already
        answered, or an answer for an id never sent, is a ``Stray`` (never guessed, never delivered);
      - an error with a null id answers the request whose response stream carried it (``related``: HTTP), else it
        is a ``Stray`` — never the only request in flight, which a line of a server's stdout could then fail;
      - a server ``ping`` is answered ``{}``; ``elicitation/create`` is ``Asked`` (section 7 answers it); any other
        server request (sampling, roots) ``-32601``, never a made-up answer (and reported as ``Declined``).
    ``client_capabilities`` is what the session declares (``initialize``; each modern request's ``_meta``).
    """

    def __init__(self, first_id: int = 1) -> None:
        self.rules: EraRules | None = None
        self.session_id: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.server_info: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self.heard = False  # whether the server said its capabilities (initialize, server/discover)
        self.instructions: str | None = None
        # the list methods whose kept catalogue a list_changed made stale since they were last read (LIST_CHANGED)
        self.stale: set[str] = set()
        # the modern era came from an unpinned probe and nothing has been answered under it yet: a legacy-looking
        # refusal may still turn it to legacy, once (``refused_as_legacy``, docs/contract.md §5)
        self.tentative = False
        self._next_id = first_id - 1
        self._pending: dict[tuple[type, Any], str] = {}  # id key -> method
        import collections

        # id key -> True when it was answered, False when its request ended without an answer (``forget``)
        self._answered: collections.OrderedDict[tuple[type, Any], bool] = collections.OrderedDict()

    @property
    def era(self) -> str | None:
        return self.rules.era if self.rules is not None else None

    @property
    def protocol_version(self) -> str | None:
        return self.rules.version if self.rules is not None else None

    # -- outgoing --------------------------------------------------------------------------------------

    def start_request(
        self,
        method: str,
        params: dict[str, Any] | None,
        rules: EraRules,
        capabilities: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """A new request under ``rules`` (the offered version's rules for ``initialize``), now in flight; a modern
        request declares ``capabilities`` (its operation's), else the session's ``client_capabilities``."""
        self._next_id += 1
        declared = self.client_capabilities if capabilities is None else capabilities
        message = build_request(self._next_id, method, params, rules, declared)
        self._pending[id_key(self._next_id)] = method
        return message

    def notification(self, method: str, params: dict[str, Any] | None) -> dict[str, Any]:
        assert self.rules is not None
        return build_notification(method, params, self.rules, self.client_capabilities)

    def ids_from(self, first_id: int) -> None:
        """Number the next requests from ``first_id`` (a resumed round: its retry must not reuse the id of the
        request an earlier process sent, docs/contract.md §5)."""
        self._next_id = first_id - 1

    def forget(self, request_id: Any) -> None:
        """The request ended without an answer; a late answer for it becomes a ``Stray``."""
        key = id_key(request_id)
        if self._pending.pop(key, None) is not None:
            self._remember(key, answered=False)

    def in_flight(self) -> list[Any]:
        return [value for _kind, value in self._pending]

    # -- incoming --------------------------------------------------------------------------------------

    def receive(self, message: Message, *, related: Any = None) -> list[Any]:
        """Events for one incoming message; ``related`` is the request whose response stream carried it."""
        if message.kind in ("result", "error"):
            target = message.id
            if target is None:  # only errors may carry a null id (parse_message)
                target = related if related is not None and id_key(related) in self._pending else None
                if target is None:
                    return [Stray(message, "null_id", related=related)]
            key = id_key(target)
            if key in self._pending:
                del self._pending[key]
                self._remember(key, answered=True)
                if message.kind == "result":
                    self.tentative = False  # the era is confirmed by an answer under it
                return [Answered(target, message)]
            seen = self._answered.get(key)
            why = "unknown" if seen is None else "duplicate" if seen else "late"
            return [Stray(message, why, related=related)]
        if message.kind == "notification":
            self.stale.update(LIST_CHANGED.get(str(message.method), ()))
            return [Notified(message, related)]
        if message.method == "ping":
            return [Reply(build_response(message.id, result={}))]
        if message.method == "elicitation/create":
            return [Asked(message, related)]
        return [
            Reply(build_response(message.id, error={"code": -32601, "message": "Method not found"})),
            Declined(str(message.method), related),
        ]

    def _remember(self, key: tuple[type, Any], *, answered: bool) -> None:
        self._answered[key] = answered
        if len(self._answered) > _ANSWERED_KEPT:
            self._answered.popitem(last=False)

    # -- era and session state -------------------------------------------------------------------------
    # Only these verbs change it; transports and flows report what happened, the core decides what it means.

    def use(self, rules: EraRules) -> EraRules:
        self.rules = rules
        return rules

    def handshake_started(self) -> None:
        """A legacy ``initialize`` is on its way: no era until its answer (``apply_initialize``)."""
        self.rules = None
        self.tentative = False

    def refused_as_legacy(self, error: BkmcpError) -> bool:
        """Whether ``error``, answering a request of a tentative modern era, means a legacy server after all: the
        session falls back to ``initialize``, once. Only a request that changes nothing may be repeated after it:
        the flows never ask this for ``tools/call``."""
        return self.tentative and self.era == "modern" and is_legacy_refusal(error)

    def session_issued(self, method: str, headers: Mapping[str, str]) -> None:
        """The HTTP headers of the answer to ``method``: the answer to ``initialize`` issues the session id
        (``Mcp-Session-Id``, docs/protocol.md)."""
        if method == "initialize":
            issued = headers.get("mcp-session-id")
            if issued:
                self.session_id = issued

    def session_ended(self) -> None:
        """The session id is no longer valid (DELETE sent, or the server lost it)."""
        self.session_id = None

    def adopt_session(self, rules: EraRules, session_id: str) -> None:
        """Continue a legacy session an earlier command left open (a task lives in it), without ``initialize``."""
        self.use(rules)
        self.session_id = session_id

    @property
    def tools_stale(self) -> bool:
        return "tools/list" in self.stale

    def catalogue_read(self, method: str = "tools/list") -> None:
        """A fresh listing (``method``) is being read: a ``list_changed`` seen before it is answered by it."""
        self.stale.discard(method)

    def apply_initialize(self, message: Message, offered: str) -> EraRules:
        """The handshake answer, parsed in one place: the chosen version (or ``ProtocolError``) and server state."""
        if message.kind == "error":
            raise rpc_error_exception("initialize", message.error or {})
        version = check_initialize_result(message.result, offered)
        self._take_server_state(message.result, message.result.get("serverInfo"))
        return self.use(era_rules(version))

    def apply_discover(self, message: Message | None, version: str, *, tentative: bool = False) -> EraRules:
        """A modern ``server/discover`` answer (or none: a pinned modern server): version and server state.
        ``tentative``: the era was concluded from the unpinned probe (``refused_as_legacy``)."""
        self.tentative = tentative
        if message is not None and message.kind == "result" and isinstance(message.result, dict):
            meta = message.result.get("_meta")
            self._take_server_state(
                message.result, meta.get("io.modelcontextprotocol/serverInfo") if isinstance(meta, dict) else None
            )
        return self.use(era_rules(version))

    def _take_server_state(self, result: dict[str, Any], info: Any) -> None:
        self.heard = True
        self.server_info = info if isinstance(info, dict) else {}
        caps = result.get("capabilities")
        self.capabilities = caps if isinstance(caps, dict) else {}
        instructions = result.get("instructions")
        self.instructions = instructions if isinstance(instructions, str) else None


# -- 5.7 negotiation as a pure decision procedure (docs/contract.md §5) ------------------------------------------------


@dataclass(frozen=True)
class Step:
    """What the negotiation wants next: ``discover`` (``probing`` or not), ``initialize``, ``restart`` (a child
    that exited may be started again), or ``done``."""

    action: str
    version: str | None = None
    probing: bool = False


@dataclass(frozen=True)
class Evidence:
    """What a ``server/discover`` probe got back: an HTTP status and the JSON-RPC message (None when the answer
    was not JSON-RPC, or when ``silent``: a shared stream gave no answer within the probe window or its child
    exited)."""

    status: int = 200
    message: Message | None = None
    silent: bool = False


class Negotiation:
    """Probe -> evidence -> next step (contract.md §5, protocol.md §3.4), with no I/O: section 7 performs each step
    and reports what came back. ``restartable`` transports (a stdio child) may be restarted before and during the
    legacy fallback. Bounded: at most two probes, one restart before and one after a failed initialize."""

    def __init__(self, pinned: str | None, *, server_info: bool, restartable: bool) -> None:
        self.pinned = pinned
        self.server_info = server_info
        self.restartable = restartable
        self.verdict: tuple[str, Any] | None = None
        self._probes = 0
        self._fallback = False
        self._restarted_before = False
        self._restart_failure: BkmcpError | None = None
        self._discover_unknown: str | None = None  # the probed version, when the probe got HTTP 404 + -32601

    def start(self) -> Step:
        if self.pinned is not None:
            if era_rules(self.pinned).handshake:
                return Step("initialize", self.pinned)
            return Step("discover", self.pinned) if self.server_info else Step("done", self.pinned)
        return self._probe(LATEST_MODERN_VERSION)

    def _probe(self, version: str) -> Step:
        self._probes += 1
        return Step("discover", version, probing=True)

    def after_discover(self, step: Step, evidence: Evidence) -> Step:
        """A probe's evidence decides the era; a non-probing discover only completes the modern state."""
        assert step.version is not None
        if not step.probing:
            return Step("done", step.version)
        verdict, value = classify_discover(evidence.status, evidence.message, step.version)
        self.verdict = (verdict, value)
        message = evidence.message
        if evidence.status == 404 and message is not None and message.error and message.error.get("code") == -32601:
            self._discover_unknown = step.version
        if verdict == "modern":
            return Step("done", value)
        if verdict == "retry" and value != step.version and self._probes < 2:
            return self._probe(value)
        if verdict == "incompatible":
            raise ProtocolError(
                f"the server supports protocol versions {', '.join(map(str, value))}; bkmcp speaks "
                f"{', '.join(SUPPORTED_VERSIONS)}",
                details={"server_versions": value, "client_versions": list(SUPPORTED_VERSIONS)},
            )
        self._fallback = True
        if self.restartable:
            self._restarted_before = True
            return Step("restart", LATEST_LEGACY_VERSION)
        return Step("initialize", LATEST_LEGACY_VERSION)

    def after_restart(self, step: Step, restarted: bool) -> Step:
        """``restart`` replaces a child only when it had exited; after a failed initialize, no restart means the
        failure stands."""
        if self._restart_failure is not None:
            failure, self._restart_failure = self._restart_failure, None
            if not restarted:
                raise failure.copy()  # stored: raised as a copy
        elif not restarted:
            self._restarted_before = False  # the probe's child still runs: one restart stays available
        return Step("initialize", step.version)

    def after_initialize_failed(self, step: Step, error: BkmcpError) -> Step:
        """A legacy fallback whose initialize failed: a stdio child that exited on it gets one fresh start; a
        ``-32022`` naming a modern version means a modern-only server (its discover answer was not recognisable,
        or came after the probe window); HTTP 404 + ``-32601`` for both methods means a modern server without
        ``server/discover``."""
        if not self._fallback:
            raise error
        if self._discover_unknown is not None and is_method_unknown(error):
            self._fallback = False
            version = self._discover_unknown
            return Step("discover", version) if self.server_info else Step("done", version)
        if isinstance(error, ConnectionFailedError) and self.restartable and not self._restarted_before:
            self._restarted_before = True
            self._restart_failure = error
            return Step("restart", step.version)
        if isinstance(error, ProtocolError):
            rpc = error.details.get("rpc_error") or {}
            data = rpc.get("data")
            supported = data.get("supported") if isinstance(data, dict) else None
            modern = [v for v in MODERN_VERSIONS if isinstance(supported, list) and v in supported]
            if rpc.get("code") == -32022 and modern:
                self._fallback = False
                return Step("discover", modern[-1])
        raise error


# -- 5.8 x-mcp-header declarations (2026-07-28) ------------------------------------------------------------------------
# One rule, two uses: a modern-era tool whose inputSchema carries an invalid ``x-mcp-header`` declaration is
# excluded from the catalogue (the 2026-07-28 transports spec: clients MUST exclude it and SHOULD warn), and the
# valid declarations of a kept tool become its ``Mcp-Param-*`` headers (``build_param_headers``). A declaration
# is valid when it is a non-empty RFC 9110 token, unique ignoring case in the whole schema, on a property whose
# ``type`` is string, integer or boolean, and that property is reached from the root through ``properties``
# only (any depth: ``properties.a.properties.b``). Anywhere else (the root, under ``items``, ``anyOf``,
# ``$defs``, ``additionalProperties`` ...) it is invalid. Data keywords (``default``, ``const``, ``enum``,
# ``examples``) are never read as schemas and ``$ref`` is never followed.

_X_MCP_HEADER = "x-mcp-header"
_HEADER_PARAM_TYPES = ("string", "integer", "boolean")
_SUBSCHEMA_KEYWORDS = frozenset(
    (
        "items",
        "additionalItems",
        "prefixItems",
        "contains",
        "additionalProperties",
        "propertyNames",
        "unevaluatedItems",
        "unevaluatedProperties",
        "not",
        "if",
        "then",
        "else",
        "contentSchema",
        "allOf",
        "anyOf",
        "oneOf",
    )
)  # value: a schema or a list of schemas
_SUBSCHEMA_MAP_KEYWORDS = frozenset(("patternProperties", "dependentSchemas", "dependencies", "$defs", "definitions"))
_MAX_HEADER_PROBLEMS = 5  # a reason names this many problems, then says how many more


def scan_header_declarations(schema: Any) -> tuple[list[tuple[tuple[str, ...], str]], list[str]]:
    """Every ``x-mcp-header`` of an inputSchema: the valid ones as ``(property path, name)`` in document order,
    and a problem text for each invalid one (empty list: the schema is acceptable)."""
    valid: list[tuple[tuple[str, ...], str]] = []
    problems: list[str] = []
    seen: dict[str, str] = {}  # lower-cased name -> pointer of its first declaration
    # (pointer segments, property path or None once off the pure `properties` chain, node); explicit stack, so
    # a deeply nested schema cannot exhaust the recursion limit
    stack: list[tuple[tuple[str, ...], tuple[str, ...] | None, Any]] = [((), (), schema)]
    while stack:
        where, path, node = stack.pop()
        if not isinstance(node, dict):
            continue
        if _X_MCP_HEADER in node:
            problem = _declaration_problem(node, where, path, seen)
            if problem is None:
                assert path  # _declaration_problem rejects the root and off-chain positions
                valid.append((path, node[_X_MCP_HEADER]))
            else:
                problems.append(problem)
        children: list[tuple[tuple[str, ...], tuple[str, ...] | None, Any]] = []
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                for prop, sub in value.items():
                    children.append(((*where, key, prop), (*path, prop) if path is not None else None, sub))
            elif key in _SUBSCHEMA_KEYWORDS:
                if isinstance(value, list):
                    children.extend(((*where, key, str(i)), None, sub) for i, sub in enumerate(value))
                else:
                    children.append(((*where, key), None, value))
            elif key in _SUBSCHEMA_MAP_KEYWORDS and isinstance(value, dict):
                children.extend(((*where, key, name), None, sub) for name, sub in value.items())
        stack.extend(reversed(children))
    return valid, problems


def _declaration_problem(
    node: dict[str, Any], where: tuple[str, ...], path: tuple[str, ...] | None, seen: dict[str, str]
) -> str | None:
    at = "".join("/" + s.replace("~", "~0").replace("/", "~1") for s in where) or "/"  # RFC 6901 (/properties/a~1b)
    name = node[_X_MCP_HEADER]
    if not path:
        place = (
            "on the inputSchema itself" if path is not None else 'not on a property reached through "properties" only'
        )
        return f"x-mcp-header at {at} is {place}"
    if not isinstance(name, str):
        return f"x-mcp-header at {at} is not a string ({type(name).__name__})"
    shown = dump_json(name if len(name) <= 60 else name[:59] + "…")
    if not name:
        return f"x-mcp-header at {at} is empty"
    if not is_token(name):
        return f"x-mcp-header {shown} at {at} is not an RFC 9110 token (letters, digits and !#$%&'*+-.^_`|~ only)"
    kind = node.get("type")
    if not (isinstance(kind, str) and kind in _HEADER_PARAM_TYPES):
        described = "has no type" if kind is None else f"has type {clip_text(dump_json(kind), 60)}"
        return (
            f"x-mcp-header {shown} at {at}: the property {described} "
            "(only a string, integer or boolean property may be a header)"
        )
    first = seen.setdefault(name.lower(), at)
    if first != at:
        return f"x-mcp-header {shown} at {at} repeats the header of {first} (names are compared ignoring case)"
    return None


def tool_header_problems(tool: Any) -> str | None:
    """Why a tool must be excluded in the modern era (its invalid ``x-mcp-header`` declarations), or None."""
    schema = tool.get("inputSchema") if isinstance(tool, dict) else None
    problems = scan_header_declarations(schema)[1]
    if not problems:
        return None
    shown = problems[:_MAX_HEADER_PROBLEMS]
    more = len(problems) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")


def split_excluded_tools(tools: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The modern-era catalogue: (usable tools in order, excluded ``[{"name", "reason"}]``)."""
    kept: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    for tool in tools:
        reason = tool_header_problems(tool)
        if reason is None:
            kept.append(tool)
        else:
            excluded.append({"name": tool.get("name"), "reason": reason})
    return kept, excluded


def render_excluded_warning(excluded: Sequence[Mapping[str, Any]]) -> str:
    """The one stderr warning of a command whose catalogue lost tools to invalid declarations."""
    names = ", ".join(clip_text(repr(e.get("name")), 80) for e in excluded[:10])
    more = f" and {len(excluded) - 10} more" if len(excluded) > 10 else ""
    return (
        f"{len(excluded)} tool(s) excluded because their inputSchema declares an invalid x-mcp-header "
        f"(2026-07-28 clients must not use them): {names}{more}; see data.excluded of --tools"
    )


def reject_excluded_tool(excluded: Sequence[Mapping[str, Any]], name: str, server_name: str) -> None:
    """Calling (or asking help for) an excluded tool is ``mcp_tool_not_found`` naming the declaration."""
    for entry in excluded:
        if entry.get("name") == name:
            raise ToolNotFoundError(
                f"server {server_name!r} has no usable tool {name!r}: it was excluded because its inputSchema "
                "declares an invalid x-mcp-header (2026-07-28 clients must not call it)",
                hint=f"{clip_text(str(entry.get('reason')), 300)}; the server's tool definition must be fixed "
                "(nothing was sent)",
                details={"excluded": {"name": name, "reason": entry.get("reason")}, "suggestions": []},
            )


# -- 5.9 tasks: who runs a call as a task, the task's shapes (docs/contract.md §5, "Tasks") ----------------------------
# Two shapes. The 2025-11-25 core (basic/utilities/tasks.mdx): a server declaring capabilities.tasks.requests.tools.call
# takes ``params.task`` on tools/call of a tool whose execution.taskSupport is "optional" or "required" and answers
# {"task": Task}; then tasks/get, tasks/result (the call's own answer), tasks/list, tasks/cancel; Task carries ttl and
# pollInterval (ms). The 2026-07-28 extension io.modelcontextprotocol/tasks (modelcontextprotocol/ext-tasks@e434597,
# specification/draft/tasks.md, 2026-08-21): the client declares it in each request's clientCapabilities.extensions;
# the server alone decides to answer resultType "task" (a flat Task with ttlMs, pollIntervalMs); tasks/get carries
# result or error inline; tasks/update, tasks/cancel; Mcp-Name is the task id. Pure decisions here; flows: 7.5.

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
TASK_TERMINAL = ("completed", "failed", "cancelled")
TASK_POLL_DEFAULT = 1.0  # seconds between polls when the server suggests none
TASK_POLL_MIN, TASK_POLL_MAX = 0.05, 30.0  # a suggestion is kept within these (nothing polls in a tight loop)

TASK_ONLY_NOTE = (
    'it needs task support (execution.taskSupport "required"): bkmcp runs its call as a task and waits for the '
    "result (--detach prints the task's handle instead)"
)


def tool_task_support(tool: Any) -> str | None:
    """A tool's ``execution.taskSupport`` as declared ("forbidden", "optional", "required"), or None: an
    ``execution`` that is not an object, or a value that is not a string, counts as absent."""
    execution = tool.get("execution") if isinstance(tool, dict) else None
    support = execution.get("taskSupport") if isinstance(execution, dict) else None
    return support if isinstance(support, str) else None


def server_runs_tasks(era: str | None, capabilities: Mapping[str, Any] | None) -> bool:
    """Whether the server declared tasks for tools/call: legacy ``capabilities.tasks.requests.tools.call``, modern
    the extension in ``capabilities.extensions`` (its server/discover answer)."""
    caps = capabilities if isinstance(capabilities, Mapping) else {}
    if era == "modern":
        extensions = caps.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)
    node: Any = caps
    for key in ("tasks", "requests", "tools", "call"):
        node = node.get(key) if isinstance(node, dict) else None
    return isinstance(node, dict)


def decide_task(
    era: str | None, capabilities: Mapping[str, Any] | None, tool: Mapping[str, Any], wanted: bool, server_name: str
) -> bool:
    """Whether ``tools/call`` of ``tool`` goes as a task. Legacy: ``params.task``, as the tool and the server's
    capability allow; a call that cannot be made as the tool or the user requires is refused before anything is
    sent (``mcp_capability_unsupported``, ``outcome: not_sent``). Modern: the extension declared in the request
    whenever the server offers it (its ``server/discover`` capabilities), since the server alone decides whether
    to make a task; with ``capabilities`` None (a pinned version: never discovered) only when ``--task`` asks or
    the tool is task-only; a server whose capabilities lack it is refused as a legacy one."""
    runs = server_runs_tasks(era, capabilities)
    support = tool_task_support(tool)
    if era == "modern" and (runs or capabilities is None):  # the server decides, and may answer at once
        return runs or wanted or support == "required"
    lacking = (
        "the server does not offer the io.modelcontextprotocol/tasks extension"
        if era == "modern"
        else "the server does not declare capabilities.tasks.requests.tools.call"
    )
    if support == "required":
        if runs:
            return True
        why = lacking
    elif not wanted:
        return False
    elif not runs:
        why = lacking
    elif support != "optional":
        why = f"the tool does not allow it (execution.taskSupport {support or 'absent'})"
    else:
        return True
    name = clip_text(repr(tool.get("name")), 80)
    first = (
        f'tool {name} of server {server_name!r} needs task support (execution.taskSupport "required"), but {why}'
        if support == "required"
        else f"--task: tool {name} of server {server_name!r} cannot run as a task: {why}"
    )
    raise CapabilityUnsupportedError(
        f"{first}; nothing was sent",
        hint="bkmcp never sends a call that the server or the tool says cannot work",
        details={"capability": "tasks", "task_support": support, "outcome": "not_sent"},
        data={"server": server_name, "tool": tool.get("name")},
        request_sent=False,
    )


def parse_created_task(result: Mapping[str, Any], era: str | None) -> dict[str, Any] | None:
    """The Task of a ``CreateTaskResult`` (modern: the result itself, ``resultType: "task"``; legacy: its ``task``),
    or None for a plain result; a task without a string ``taskId`` and ``status`` is a protocol error."""
    if result.get("resultType") == "task":
        task: Any = result
    elif era != "modern" and isinstance(result.get("task"), dict) and "content" not in result:
        task = result["task"]
    else:
        return None
    check_task_view(task, "tools/call")
    return dict(task)


def check_task_view(task: Any, method: str) -> None:
    """A Task (``tasks/get``, a created task) must name its id and status as strings."""
    if not isinstance(task, dict) or not isinstance(task.get("taskId"), str) or not isinstance(task.get("status"), str):
        raise ProtocolError(f"{method} returned a malformed task (no string taskId and status)", data={"result": task})


def read_task_timing(task: Mapping[str, Any], era: str | None) -> tuple[int | None, int | None]:
    """(ttl, poll interval) in ms as the task says them (legacy ``ttl``/``pollInterval``, modern ``ttlMs``/
    ``pollIntervalMs``); None where absent, null (unlimited ttl) or not a non-negative integer."""
    keys = ("ttlMs", "pollIntervalMs") if era == "modern" else ("ttl", "pollInterval")
    out: list[int | None] = []
    for key in keys:
        value = task.get(key)
        out.append(value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None)
    return out[0], out[1]


def build_task_handle(
    task: Mapping[str, Any], *, server: str, tool: str | None, era: str | None, version: str | None, transport: str
) -> dict[str, Any]:
    """What bkmcp keeps and prints of a task (``--detach``, the local store): the MCP task id and where it lives,
    never an argument value or a credential."""
    ttl, poll = read_task_timing(task, era)
    handle: dict[str, Any] = {
        "mcp_task_id": task["taskId"],
        "server": server,
        "tool": tool,
        "era": era,
        "protocol_version": version,
        "transport": transport,
        "status": task.get("status"),
        "ttl_ms": ttl,
        "poll_interval_ms": poll,
        "created_at": task.get("createdAt") if isinstance(task.get("createdAt"), str) else None,
    }
    message = task.get("statusMessage")
    if isinstance(message, str) and message:
        handle["status_message"] = clip_text(printable(message), 300)
    return handle


def task_poll_delay(poll_ms: int | None, draw: float) -> float:
    """Seconds before the next poll: the server's interval (``TASK_POLL_DEFAULT`` when it gives none) kept within
    [``TASK_POLL_MIN``, ``TASK_POLL_MAX``], times 0.8-1.0 by ``draw`` in [0, 1) (jitter: many waiting clients do
    not poll in step, and a wait never exceeds one interval)."""
    base = poll_ms / 1000 if poll_ms else TASK_POLL_DEFAULT
    return min(max(base, TASK_POLL_MIN), TASK_POLL_MAX) * (0.8 + 0.2 * draw)


def build_task_refusal(tool: Mapping[str, Any], server_name: str) -> CapabilityUnsupportedError | None:
    """The error that answers a call of a task-only tool instead of a ``tools/call`` (nothing is sent), or None
    when the tool may be called ("optional", "forbidden", absent or malformed)."""
    if tool_task_support(tool) != "required":
        return None
    name = tool.get("name")
    return CapabilityUnsupportedError(
        f"tool {clip_text(repr(name), 80)} of server {server_name!r} needs task support "
        '(execution.taskSupport "required"), which bkmcp does not have; nothing was sent',
        hint="call it from a client with MCP task support; bkmcp never sends a call that can only run as a task",
        details={"capability": "tasks", "task_support": "required", "outcome": "not_sent"},
        data={"server": server_name, "tool": name},
        request_sent=False,
    )


# -- 5.10 skills (SEP-2640): an entry's files, each verified, SKILL.md's frontmatter (verify_skill_file) --------------
# modelcontextprotocol/modelcontextprotocol@01b12e05 seps/2640-skills-extension.md, "Integrity and verification": a
# file of a skill's `resources` is used only once its bytes match the entry's `digest` (`sha256:` + 64 lowercase hex
# of the raw bytes) and, when the entry gives one, its `size`; SKILL.md's YAML frontmatter must equal the entry's
# `frontmatter` field by field (the conformance harness 0.2.0-alpha.12 checks all three). Nothing here reads a file:
# 7.4 reads them, lazily (SKILL.md first; nothing after a failure).

SKILL_FILE = "SKILL.md"
_SKILL_DIGEST = lazy_re(r"sha256:[0-9a-f]{64}")


@dataclass(frozen=True)
class SkillFile:
    """One file of a skill's ``resources``: its URI, its path below the skill's root (parts), digest and size."""

    uri: str
    parts: tuple[str, ...]
    digest: str
    size: int | None


def skill_name(entry: Mapping[str, Any]) -> str:
    """A listed skill's name: its frontmatter's ``name``, else the last segment of its ``<skill-path>``."""
    frontmatter = entry.get("frontmatter")
    name = frontmatter.get("name") if isinstance(frontmatter, dict) else None
    if isinstance(name, str) and name:
        return name
    uri = str(entry.get("uri", ""))
    return uri[: -len("/" + SKILL_FILE)].rsplit("/", 1)[-1] if uri.endswith("/" + SKILL_FILE) else uri


def skill_unverified(entry: Mapping[str, Any], file: str, reason: str, why: str) -> SkillUnverifiedError:
    return SkillUnverifiedError(
        f"skill {short_text(skill_name(entry), 80)}: {short_text(file, 200)} {why}; nothing was used",
        hint="the content is not what the server's skills/list promised: do not use this skill",
        details={"file": file, "reason": reason},
    )


def parse_skill_files(entry: Mapping[str, Any]) -> list[SkillFile]:
    """An entry's ``resources`` as files, SKILL.md first: each URI below the skill's root (the entry's URI without
    ``/SKILL.md``), a plain relative path (``parse_relative_path``), once, with a ``sha256:`` digest and, when given,
    an integer size; SKILL.md among them. Anything else, or no ``resources`` (a "dynamic" skill offers no digests),
    is ``skill_unverified``: bkmcp loads only what it can verify."""
    uri = entry.get("uri")
    listed = entry.get("resources")
    if not isinstance(uri, str) or not uri.endswith("/" + SKILL_FILE):
        raise skill_unverified(entry, str(uri), "uri", f"is not a skill's {SKILL_FILE} URI")
    if not isinstance(listed, list):
        raise skill_unverified(entry, uri, "no_digests", "lists no files with digests (a dynamic skill)")
    root = uri[: -len(SKILL_FILE)]
    files: dict[str, SkillFile] = {}
    for item in listed:
        file_uri = item.get("uri") if isinstance(item, dict) else None
        if not isinstance(file_uri, str):
            raise skill_unverified(entry, uri, "manifest", "lists a file without a URI")
        parts = parse_relative_path(file_uri[len(root) :]) if file_uri.startswith(root) else None
        digest, size = item.get("digest"), item.get("size")
        if parts is None:
            raise skill_unverified(entry, file_uri, "path", "is not a plain relative path below the skill")
        if not isinstance(digest, str) or not _SKILL_DIGEST.fullmatch(digest):
            raise skill_unverified(entry, file_uri, "manifest", "has no sha256:<64 hex> digest")
        if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 0):
            raise skill_unverified(entry, file_uri, "manifest", "has a size that is not a byte count")
        if file_uri in files:
            raise skill_unverified(entry, file_uri, "manifest", "is listed twice")
        files[file_uri] = SkillFile(file_uri, parts, digest, size)
    if uri not in files:
        raise skill_unverified(entry, uri, "manifest", "is not among the skill's listed files")
    return [files.pop(uri), *files.values()]


def verify_skill_file(entry: Mapping[str, Any], file: SkillFile, result: Mapping[str, Any]) -> bytes:
    """The bytes of ``file`` from its ``resources/read`` result, once verified: exactly one contents item for its
    URI (``text`` as UTF-8 or base64 ``blob``), of the listed size, with the listed digest; SKILL.md's frontmatter
    equal to the entry's (``parse_frontmatter``). Else ``skill_unverified``."""
    import base64
    import binascii
    import hashlib

    contents = result.get("contents")
    item = contents[0] if isinstance(contents, list) and len(contents) == 1 else None
    if not isinstance(item, dict) or item.get("uri") not in (None, file.uri):
        raise skill_unverified(entry, file.uri, "contents", "was not answered as exactly one contents item")
    if isinstance(item.get("text"), str):
        data = item["text"].encode("utf-8", "surrogatepass")
    else:
        try:
            data = base64.b64decode("".join(str(item.get("blob")).split()), validate=True)
        except (binascii.Error, ValueError):
            raise skill_unverified(entry, file.uri, "contents", "has neither text nor a base64 blob") from None
    if file.size is not None and len(data) != file.size:
        raise skill_unverified(entry, file.uri, "size", f"is {len(data)} bytes, listed as {file.size}")
    if "sha256:" + hashlib.sha256(data).hexdigest() != file.digest:
        raise skill_unverified(entry, file.uri, "digest", "does not match its listed digest")
    if file.parts == (SKILL_FILE,):
        frontmatter = parse_frontmatter(data.decode("utf-8", "replace"))
        if frontmatter is None:
            raise skill_unverified(entry, file.uri, "frontmatter", "has no YAML frontmatter bkmcp can read")
        listed = entry.get("frontmatter")
        for key in sorted(set(frontmatter) | set(listed if isinstance(listed, dict) else {})):
            mine = _yaml_value(frontmatter.get(key))
            theirs = _yaml_value(listed.get(key) if isinstance(listed, dict) else None)
            if mine != theirs:
                raise skill_unverified(entry, file.uri, "frontmatter", f"has frontmatter {key!r} unlike the listing's")
        name = frontmatter.get("name")
        if name != entry["uri"][: -len("/" + SKILL_FILE)].rsplit("/", 1)[-1]:
            raise skill_unverified(entry, file.uri, "frontmatter", "has a name that is not its directory's")
    return data


def _yaml_value(value: Any) -> Any:
    """A value comparable across YAML and JSON: numbers as exact decimals, booleans apart from numbers."""
    if isinstance(value, bool) or value is None:
        return ("literal", value)
    if isinstance(value, (int, float, decimal.Decimal)):
        return ("number", decimal.Decimal(str(value)).normalize())
    if isinstance(value, dict):
        return ("map", {str(k): _yaml_value(v) for k, v in value.items()})
    if isinstance(value, list):
        return ("list", [_yaml_value(v) for v in value])
    return ("text", value)


_FRONTMATTER = lazy_re(r"(?s)\A\ufeff?---\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)")
_YAML_KEY = lazy_re(r"([^\s#'\"{}\[\],&*!|>%@`-][^:#]*?|\"[^\"]*\"|'[^']*')\s*:(?:\s+(.*))?$")


def parse_frontmatter(text: str) -> dict[str, Any] | None:
    """A SKILL.md's leading ``---`` YAML frontmatter as a mapping, for the subset skills use: nested block mappings,
    block sequences, plain, quoted and block (``|``, ``>``) scalars, flow lists of plain scalars. None when there is
    none, or it uses YAML beyond that subset (anchors, tags, flow mappings…): bkmcp then refuses to verify it."""
    match = _FRONTMATTER.match(text)
    if match is None:
        return None
    lines = [line.rstrip() for line in match.group(1).split("\n")]
    try:
        value, end = _yaml_block(lines, 0, 0)
    except ValueError:
        return None
    if any(line.strip() and not line.lstrip().startswith("#") for line in lines[end:]) or not isinstance(value, dict):
        return None
    return value


def _yaml_indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _yaml_next(lines: Sequence[str], at: int) -> int:
    while at < len(lines) and (not lines[at].strip() or lines[at].lstrip().startswith("#")):
        at += 1
    return at


def _yaml_block(lines: Sequence[str], at: int, indent: int) -> tuple[Any, int]:
    """The block mapping or sequence starting at line ``at`` indented ``indent``; (its value, the next line)."""
    at = _yaml_next(lines, at)
    if at >= len(lines) or "\t" in lines[at][: _yaml_indent(lines[at]) + 1]:
        raise ValueError("no block")
    sequence = lines[at].lstrip().startswith("- ") or lines[at].strip() == "-"
    out: Any = [] if sequence else {}
    while at < len(lines):
        line = lines[at]
        if _yaml_indent(line) < indent:
            break
        if _yaml_indent(line) > indent:
            raise ValueError("bad indentation")
        body = line.strip()
        if sequence:
            if not (body.startswith("- ") or body == "-"):
                break
            if _YAML_KEY.fullmatch(body[1:].strip()):
                raise ValueError("a sequence of mappings")
            value, at = _yaml_value_at(lines, at, indent, body[1:].strip())
            out.append(value)
        else:
            key = _YAML_KEY.fullmatch(body)
            if key is None:
                raise ValueError("not a key")
            name = _yaml_scalar(key.group(1).strip())
            if not isinstance(name, str) or name in out:
                raise ValueError("bad or repeated key")
            out[name], at = _yaml_value_at(lines, at, indent, (key.group(2) or "").strip())
        at = _yaml_next(lines, at)
    return out, at


def _yaml_value_at(lines: Sequence[str], at: int, indent: int, rest: str) -> tuple[Any, int]:
    """The value after ``key:`` or ``-`` on line ``at``: inline, a block scalar, or a nested block below."""
    if rest.startswith(("|", ">")):
        return _yaml_block_scalar(lines, at, indent, rest)
    if rest.startswith("#") or not rest:
        following = _yaml_next(lines, at + 1)
        nested = following < len(lines) and (
            _yaml_indent(lines[following]) > indent
            or _yaml_indent(lines[following]) == indent
            and lines[following].lstrip().startswith("- ")
            and not lines[at].lstrip().startswith("- ")
        )
        if not nested:
            return None, at + 1
        return _yaml_block(lines, following, _yaml_indent(lines[following]))
    # a plain scalar may go on over more-indented lines, folded with spaces
    at += 1
    while at < len(lines) and lines[at].strip() and _yaml_indent(lines[at]) > indent and rest[:1] not in "\"'[":
        if _YAML_KEY.fullmatch(lines[at].strip()):
            raise ValueError("a mapping inside a plain scalar")
        rest += " " + lines[at].strip()
        at += 1
    return _yaml_scalar(rest), at


def _yaml_block_scalar(lines: Sequence[str], at: int, indent: int, header: str) -> tuple[str, int]:
    """``|`` (lines kept) or ``>`` (lines folded), chomped as ``-`` / ``+`` / clip say."""
    style, chomp = header[0], header[1:2]
    if header[1:].strip() not in ("", "-", "+"):
        raise ValueError("block scalar indicator")
    body: list[str] = []
    at += 1
    inner: int | None = None
    while at < len(lines) and (not lines[at].strip() or _yaml_indent(lines[at]) > indent):
        if lines[at].strip() and inner is None:
            inner = _yaml_indent(lines[at])
        body.append(lines[at][inner or 0 :] if lines[at].strip() else "")
        at += 1
    while body and not body[-1] and chomp != "+":
        body.pop()
    if style == "|":
        text = "\n".join(body)
    else:
        text = ""
        for number, line in enumerate(body):  # a blank line is a line break, the others fold into spaces
            text += line if number == 0 or not body[number - 1] else ("\n" if not line else " " + line)
    return text + ("" if chomp == "-" or not text else "\n"), at


def _yaml_scalar(text: str) -> Any:
    """One inline YAML value: a quoted string, a flow list of plain scalars, or a plain scalar (null, booleans,
    integers and decimals as YAML 1.2's core schema reads them, else the text)."""
    if text.startswith('"'):
        if not text.endswith('"') or len(text) < 2:
            raise ValueError("double-quoted")
        return json.loads(text)
    if text.startswith("'"):
        if not text.endswith("'") or len(text) < 2:
            raise ValueError("single-quoted")
        return text[1:-1].replace("''", "'")
    if text.startswith("["):
        inner = text[1:-1].strip() if text.endswith("]") else None
        if inner is None or any(ch in inner for ch in "[]{}\"'"):
            raise ValueError("flow sequence")
        return [_yaml_scalar(part.strip()) for part in inner.split(",")] if inner else []
    text = text.split(" #", 1)[0].rstrip()
    if text[:1] in ("{", "&", "*", "!", "%", "@", "`", "|", ">"):
        raise ValueError("beyond the subset")
    if text in ("", "~", "null", "Null", "NULL"):
        return None
    if text in ("true", "True", "TRUE", "false", "False", "FALSE"):
        return text.lower() == "true"
    if re.fullmatch(r"[-+]?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?", text):
        return decimal.Decimal(text)
    return text


# ======================================================================================================
# 6. Transports — deferred in the pyz
# ======================================================================================================

# -- 6.1 the Transport seam (docs/design.md, "The session engine") -----------------------------------------------------
# A transport moves section-5 messages and decides nothing about eras or matching. The seam (``Transport``):
#   ``attach(deliver, lost, answer_headers)``  ``deliver(message, related) -> bool`` takes every incoming message
#       (True once ``related``, the request whose stream carried it, has been answered); ``lost()`` says a shared
#       stream died (every request in flight on it failed), ``lost(Unreadable(id, why, reason))`` that one answer
#       on it could not be read (too deep, too long: that request fails at once); ``answer_headers(method,
#       headers)`` gets the HTTP headers of each answer to a request (the session core decides what they issue:
#       the session id).
#   ``send(outgoing)``  one request, notification or response (an ``Outgoing``: the message and what sending it
#       needs, the session id the caller holds included). Over HTTP the answer's stream is read in the caller's
#       thread and handed to ``deliver`` before ``send`` returns (concurrent callers: concurrent POSTs on one
#       pooled client); over stdio one line is written and a reader thread delivers what comes back.
#   ``failure(method, sent=)``, ``timeout_error(method, deadline)``  the errors a request waiting on
#       a shared stream ends with; ``stop_requests()`` (every request in flight fails at once, none is sent any
#       more: the first step of closing), ``end_session(deadline, rules, session_id)``, ``close()``; ``alive``
#       (False once a child's stream ended).
#   Capability flags replace tests of the server type: ``has_sessions`` (Mcp-Session-Id, DELETE at close),
#   ``shared_stream`` (one stream for all messages: a silent server needs a probe window; cancellation needs a
#   notification), ``stdio`` (what only a child process answers, ``StdioPart``: it may be restarted; None: HTTP).
# Foreign exceptions are translated once, here (``HttpxBoundary``), with ``raise … from exc``; HTTP statuses
# become section-1 errors before they leave this section (their declared ``http_status``, ``http_message`` and
# ``session_lost`` fields say what the status was, for era evidence and lost sessions).

if TYPE_CHECKING:
    from typing import Protocol

    Deliver = Callable[[Message, Any], bool]  # deliver(message, related) -> the related request is answered
    Lost = Callable[..., None]  # lost(): the shared stream ended; lost(Unreadable(...)): one answer on it is unreadable
    AnswerHeaders = Callable[[str, Mapping[str, str]], None]  # answer_headers(method, headers)
else:
    Protocol = object


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message on its way out and what its transport needs to send it: the seam's one argument (as httpx's
    ``handle_request(request)``). ``rules`` is None for the legacy ``initialize`` (no version header yet);
    ``extra_headers`` go beside the era's (``Mcp-Param-*``, HTTP only); ``strict`` False: a failure to send is
    logged, not raised (a reply or a notification nobody waits for); ``session_id`` is the one the caller holds."""

    message: dict[str, Any]
    rules: EraRules | None
    deadline: Deadline
    session_id: str | None = None
    extra_headers: Iterable[tuple[str, str]] = ()
    strict: bool = True


class StdioPart(Protocol):
    """What only a transport over a child process answers (``Transport.stdio``; HTTP has none): the child's
    ``pid`` and ``exit_status``; ``restart_if_exited()`` (before the legacy fallback). Its stderr: the last lines,
    a position to count from, the end of its start-up (``mark_started``, as ``ChildProcess.stderr_tail`` counts);
    its stdout lines that were not JSON-RPC, counted alike. The era probe on the shared stream (docs/contract.md
    §5): how much of what was written the server has not read yet (None: cannot be told), and the probe's stderr
    kept apart from the tail (``probe_begins`` before it is sent, ``probe_ends`` once answered or given up)."""

    @property
    def pid(self) -> int | None: ...

    @property
    def exit_status(self) -> int | None: ...

    def restart_if_exited(self) -> bool: ...

    def stderr_tail(self, since: int | None = None) -> list[str]: ...

    def stderr_position(self) -> int | None: ...

    def mark_started(self) -> None: ...

    def stdout_skipped(self, since: int | None = None) -> tuple[list[str], int]: ...

    def stdout_position(self) -> int | None: ...

    def unread_input(self) -> int | None: ...

    def probe_begins(self) -> None: ...

    def probe_ends(self, rejected: bool) -> None: ...


class Transport(Protocol):
    kind: str
    has_sessions: bool
    shared_stream: bool
    responses: int

    @property
    def stdio(self) -> StdioPart | None: ...

    @property
    def alive(self) -> bool: ...

    def attach(self, deliver: Deliver, lost: Lost, answer_headers: AnswerHeaders) -> None: ...

    def send(self, outgoing: Outgoing) -> None: ...

    def failure(self, method: str, *, sent: bool) -> BkmcpError: ...

    def timeout_error(self, method: str, deadline: Deadline) -> BkmcpError: ...

    # What only an HTTP session has: a transport without one (stdio: the session is the process, its pipes the one
    # connection; stopping the child ends its stream, which fails the requests in flight) keeps these.
    # The server's own stream for requests outside any request's stream (legacy HTTP's optional GET): stdio has
    # one stream for everything already.
    def listen(self, rules: EraRules, session_id: str | None, deadline: Deadline) -> None:
        pass

    def stop_requests(self) -> None:
        pass

    def close_idle_connections(self) -> int:
        return 0

    def end_session(self, deadline: Deadline, rules: EraRules | None = None, session_id: str | None = None) -> None:
        pass

    def close(self, deadline: Deadline | None = None) -> None: ...


def is_exhaustion(exc: BaseException | None) -> bool:
    """``exc`` (or what caused it) is the system running out of descriptors, processes or memory (EMFILE, ENFILE,
    EAGAIN, ENOMEM; a thread that cannot start): a resource limit, never an internal error."""
    import errno

    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM):
            return True
        if isinstance(exc, MemoryError) or (isinstance(exc, RuntimeError) and "can't start new thread" in str(exc)):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def request_was_sent(error: BaseException) -> bool:
    """Whether the request reached the wire; not known counts as sent (never resend)."""
    return not isinstance(error, BkmcpError) or error.request_sent is not False


# -- 6.2 HTTP: status mapping, the session id, SSE resumption (docs/contract.md §7, docs/protocol.md) ------------------
# ``HttpTransport``: one pooled httpx client, a POST per message, the answer's JSON or SSE stream read in the caller's
# thread. Statuses are mapped here: 401 -> ``mcp_auth_required``, 403 -> ``mcp_permission_denied``
# (``HttpTransport._check_status``), any other non-2xx by ``status_failure``. The ``Mcp-Session-Id`` header of each
# answer goes to the session core (section 5 decides that ``initialize`` issues it); a POST's stream that closes
# before its answer is resumed by GET + Last-Event-ID (``HttpTransport._resume``).


def status_failure(status: int, message: Message | None, text: str, method: str, *, with_session: bool) -> RemoteError:
    """A non-2xx answer that is not 3xx/401/403, as the error to report, with its ``http_status``,
    ``http_message`` (the JSON-RPC message of the body, era evidence) and ``session_lost`` fields for the flows."""
    rpc_error = message.error if message is not None and message.kind == "error" else None
    # 404 on a request carrying a session id (spec), or server-everything's 400 "No valid session ID"
    fields: dict[str, Any] = {
        "http_status": status,
        "http_message": message,
        "session_lost": with_session
        and (
            status == 404
            or (status == 400 and rpc_error is not None and "session" in str(rpc_error.get("message", "")).lower())
        ),
        "request_sent": True,
    }
    if rpc_error is not None:
        error = rpc_error_exception(method, rpc_error)
        changes: dict[str, Any] = {"details": {**error.details, "http_status": status}}
        if isinstance(error, ProtocolError):
            changes["message"] = (
                f"the server answered {method} with HTTP {status} and JSON-RPC error "
                f"{rpc_error.get('code')}: {clip_text(str(rpc_error.get('message')), 300)}"
            )
        return error.copy(**changes, **fields)
    snippet = f": {clip_text(text.strip(), 200)}" if text.strip() else ""
    return ProtocolError(
        f"the server answered {method} with HTTP {status}{snippet}", details={"http_status": status}, **fields
    )


def media_type(headers: Mapping[str, str]) -> str:
    """A response's media type: its Content-Type without parameters, lowercased ("" when it has none)."""
    return headers.get("content-type", "").split(";")[0].strip().lower()


def _wire_headers(headers: list[tuple[str, str]]) -> list[tuple[str, str | bytes]]:
    """httpx encodes str header values as ASCII; a configured non-ASCII value goes out as its UTF-8 bytes."""
    return [(name, value if value.isascii() else value.encode("utf-8")) for name, value in headers]


_ERROR_BODY_LIMIT = 64 * 1024
_RESUME_DEFAULT_MS = 1000
_RESUME_MAX_IDLE = 20
# httpcore imports every async back end it can find (trio, anyio, sniffio) when it loads, and httpx its optional
# extras (click, rich and pygments for its own CLI; brotli and zstandard decoders). bkmcp uses the sync client
# only and must behave the same on every host, so while httpx loads these names are hidden (unless something
# imported them already). That saves loading anyio (~25 ms) on every remote command, trio (~100 ms) on hosts that
# have it, and keeps the Accept-Encoding header from depending on what the host has installed.
_HTTPX_HIDDEN = (
    "trio",
    "anyio",
    "sniffio",
    "click",
    "rich",
    "pygments",
    "brotli",
    "brotlicffi",
    "zstandard",
    "h2",
    "socksio",
)
_HTTPX_DEFERRED = ("certifi", "idna", "ipaddress", "mimetypes", "ssl")  # stood in for while httpx loads
_HTTPX_LOCK = _thread.allocate_lock()  # the builtin lock type: `threading` is not imported by the help paths
_TLS_LOCK = _thread.allocate_lock()  # verifying clients are made one at a time (their CA bundle's first lookup)
_HTTPX: list[Any] = []  # the httpx module once its import has *finished* (sys.modules holds it while it runs)
_HAND_OVER_POOL: list[type] = []  # the pool class of ``_hand_over_pool``, made once httpcore is loaded


def import_httpx() -> Any:
    """The httpx module, loaded (the first time, once, under a lock) without the optional modules of
    ``_HTTPX_HIDDEN``: ``sys.modules`` is changed only during that one import, never per call.

    The fast path reads ``_HTTPX``, never ``sys.modules``: while one thread imports httpx, ``sys.modules["httpx"]``
    is already the partially initialised module, and a second thread must wait for the import, not use it."""
    if _HTTPX:
        return _HTTPX[0]
    import importlib

    with _HTTPX_LOCK:
        if _HTTPX:
            return _HTTPX[0]
        module = sys.modules.get("httpx")
        if module is not None:  # imported by someone else (a test, an embedding program): finished or being finished
            module = importlib.import_module("httpx")  # waits for an import still running in another thread
            _HTTPX.append(module)
            return module
        hidden = [name for name in _HTTPX_HIDDEN if name not in sys.modules]
        for name in hidden:
            sys.modules[name] = None  # type: ignore[assignment]  # `import name` now raises ImportError
        deferred = {name: _deferred_module(name) for name in _HTTPX_DEFERRED if name not in sys.modules}
        try:
            importlib.import_module("httpcore")  # httpx imports it on the first Client: load it with the rest hidden
            module = importlib.import_module("httpx")
            _HTTPX.append(module)
            if SHORT_COMMAND:  # what it loaded lives to the end of the process: the collections to come skip it
                freeze_heap()
            return module
        except ImportError as exc:  # nothing was sent: a local error that says what is missing, not "a bkmcp bug"
            raise InternalError(
                f"bkmcp cannot load httpx, which every remote command needs: {exc}",
                hint="from bkmcp.pyz: download or build it again (and check that XDG_CACHE_HOME or TMPDIR is "
                "writable); from source: pip install httpx",
            ) from exc
        finally:
            for name in hidden:
                if name in sys.modules and sys.modules[name] is None:
                    del sys.modules[name]
            for name, stand_in in deferred.items():
                if sys.modules.get(name) is stand_in:
                    del sys.modules[name]  # the next `import certifi` (an https:// client's) loads the real one


def _deferred_module(module: str) -> Any:
    """A stand-in, while httpx loads, for a module it imports at the top but uses only in functions: certifi (https://,
    ~10 ms), idna (a non-ASCII host), ipaddress (an IP literal; urllib.parse's too), mimetypes (uploads), ssl (TLS,
    ~3 ms: an http:// pool never asks it, ``_plain_transport``; from source, httpcore's ``_ssl`` loads it at once).
    Every attribute is the real module's, loaded on first access: exact; ``import_httpx`` then removes it."""
    stand_in = type(sys)(module)  # a module object (types.ModuleType)

    def real(name: str) -> Any:
        import importlib

        if sys.modules.get(module) is stand_in:
            del sys.modules[module]
        return getattr(importlib.import_module(module), name)

    stand_in.__getattr__ = real  # type: ignore[method-assign]  # PEP 562: every attribute comes from the real one
    sys.modules[module] = stand_in
    return stand_in


def _no_cookies() -> Any:
    """A cookie jar that stores nothing: the configured headers are the only identity (docs/contract.md §4)."""
    from http.cookiejar import CookieJar, DefaultCookiePolicy

    return CookieJar(policy=DefaultCookiePolicy(allowed_domains=[]))


def new_http_client(url: str, *, insecure: bool) -> Any:
    """The pooled ``httpx.Client`` of one HTTP session (or, injected, of many): no redirects, no cookies, no
    proxies or ~/.netrc from the environment (trust_env=False), TLS verified unless ``insecure``. A plain http://
    endpoint gets a pool with no TLS context at all (redirects are never followed, so it only ever reaches that
    http:// origin): neither certifi nor an ``SSLContext`` is loaded for it (``_plain_transport``)."""
    httpx = import_httpx()

    options = {
        "follow_redirects": False,
        "verify": not insecure,
        "trust_env": False,
        "cookies": _no_cookies(),
        "headers": {"User-Agent": f"bkmcp/{__version__}"},
        "limits": httpx.Limits(max_connections=None, max_keepalive_connections=20),
    }
    if not url.lower().startswith("https:"):
        return _keep_hand_overs(httpx.Client(**options, transport=_plain_transport(httpx, options["limits"])))
    with _TLS_LOCK:  # certifi.where() fills a global on first use (from the pyz: a temporary copy of the CA bundle)
        return _keep_hand_overs(httpx.Client(**options))


def _plain_transport(httpx: Any, limits: Any) -> Any:
    """The ``httpx.HTTPTransport`` that ``httpx.Client(limits=limits)`` builds, minus its TLS context: httpx 0.28
    makes one (``create_ssl_context``, which imports certifi) even for ``verify=False``; here the httpcore pool
    gets ``ssl_context=None``, which httpcore uses only for an https:// origin (then its own verifying default).
    Its network back end is httpcore's own but for the host name it resolves (``_ascii_host``) and the TLS object
    of a plain socket, which it knows is None without asking ``ssl``, so an http:// command never loads it."""
    import httpcore
    from httpcore._backends.sync import SyncStream

    class Stream(SyncStream):  # holds the plain socket connect_tcp made (start_tls gives a stream of its own)
        def get_extra_info(self, info: str) -> Any:
            return None if info == "ssl_object" else super().get_extra_info(info)

    class Backend(httpcore.SyncBackend):  # getaddrinfo gets an ASCII host name as bytes: _ascii_host
        def connect_tcp(self, host: str, port: int, *more: Any, **options: Any) -> Any:
            stream = super().connect_tcp(_ascii_host(host), port, *more, **options)  # type: ignore[arg-type]
            return Stream(stream._sock)  # type: ignore[attr-defined]  # the SyncStream it just made

    transport = httpx.HTTPTransport.__new__(httpx.HTTPTransport)
    transport._pool = httpcore.ConnectionPool(
        network_backend=Backend(),
        ssl_context=None,
        max_connections=limits.max_connections,
        max_keepalive_connections=limits.max_keepalive_connections,
        keepalive_expiry=limits.keepalive_expiry,
    )
    return transport


def _ascii_host(host: str) -> str | bytes:
    """``host`` as the 'idna' codec would hand it to getaddrinfo (which encodes every text host name with it), without
    loading the codec (encodings.idna, stringprep, unicodedata: ~0.6 ms of an HTTP command): an ASCII name whose
    labels before the last have 1-63 characters and whose last has fewer than 64 is its ASCII bytes, the codec's
    own fast path on 3.9-3.14; anything else stays text, for the codec to encode or refuse as before
    (tests/artifact/test_pyz.py compares the two on every Python)."""
    if host.isascii():
        *labels, last = host.split(".")
        if host and all(0 < len(label) < 64 for label in labels) and len(last) < 64:
            return host.encode("ascii")
    return host


def _hand_over_pool() -> type | None:
    """httpcore 1.0's ``ConnectionPool`` without its hand-over race (encode/httpcore#1110, open upstream).

    A pass of the pool (``_assign_requests_to_connections``, under the pool lock, whenever a request starts or ends)
    hands an idle keep-alive connection to a waiting request; the connection stays IDLE until that request's thread
    wakes and starts on it. A pass by another thread in between found it idle and closed it (a surplus keep-alive
    connection beyond ``max_keepalive_connections``, an expired one, or one closed to make room); that close runs
    after the lock is released, so it could land once the request was sent: "[Errno 9] Bad file descriptor", or a
    hang, for a call the server ran. Here a pass never sees a connection a pending request holds (one handed over,
    or in use), and hands out one per waiting request (the stock pass gives the same IDLE connection to every
    request waiting, and all but one retry): a connection handed over is its request's until that request ends,
    which ``_shut_pending`` relies on. None when httpcore is not the 1.0 this was written for (the race stays)."""
    if _HAND_OVER_POOL:
        return _HAND_OVER_POOL[0]
    base = getattr(sys.modules.get("httpcore"), "ConnectionPool", None)
    if base is None or not hasattr(base, "_assign_requests_to_connections"):
        return None

    class HandOverPool(base):  # type: ignore[misc, valid-type]
        def _assign_requests_to_connections(self) -> list[Any]:
            pool: Any = self  # httpcore's own state, untyped here
            everyone, limit = pool._requests, pool._max_connections
            held = {id(r.connection) for r in everyone if r.connection is not None}
            closing: list[Any] = []
            try:
                for waiting in [r for r in everyone if r.is_queued()] or [None]:
                    kept = [c for c in pool._connections if id(c) in held]
                    pool._connections = [c for c in pool._connections if id(c) not in held]
                    pool._requests = [] if waiting is None else [waiting]
                    pool._max_connections = max(limit - len(kept), 0)  # the held ones still count
                    try:
                        closing += super()._assign_requests_to_connections()
                    finally:
                        pool._connections = kept + pool._connections
                    if waiting is not None and waiting.connection is not None:
                        held.add(id(waiting.connection))
            finally:
                pool._requests, pool._max_connections = everyone, limit
            return closing

    _HAND_OVER_POOL.append(HandOverPool)
    return HandOverPool


def _keep_hand_overs(client: Any) -> Any:
    """``client`` with its connection pool a ``_hand_over_pool()`` (same state, one method changed)."""
    pool = _shaped_pool(client)
    cls = _hand_over_pool()
    if cls is not None and type(pool) is cls.__bases__[0]:
        pool.__class__ = cls
    return client


def _shaped_pool(client: Any) -> Any:
    """The connection pool of ``client`` if it has the httpcore 1.0 state that ``_hand_over_pool`` and
    ``HttpTransport`` read under its lock, else None (an injected test transport; another httpcore)."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    names = ("_requests", "_connections", "_max_connections", "_optional_thread_lock")
    return pool if all(hasattr(pool, name) for name in names) else None


def translate_httpx_error(exc: BaseException, url: str, deadline: Deadline) -> BkmcpError:
    """httpx exception -> bkmcp error (the one mapping of foreign exceptions; ``HttpxBoundary`` calls it)."""
    httpx = import_httpx()

    target = strip_url_credentials(url)
    if isinstance(exc, (httpx.InvalidURL, UnicodeError)):  # IDNA / host name encoding, before any I/O
        return ConnectionFailedError(
            f"the host name in {target} is not valid: {clip_text(str(exc), 200)}",
            hint='check the host name in the server\'s "url"',
            request_sent=False,
        )
    if isinstance(exc, httpx.TimeoutException):
        sent = not isinstance(exc, (httpx.ConnectTimeout, httpx.PoolTimeout))
        return budget_error(f"no answer from {target}", deadline.seconds, request_sent=sent)
    chain: list[BaseException] = []
    cursor: BaseException | None = exc
    while cursor is not None and len(chain) < 10:
        chain.append(cursor)
        cursor = cursor.__cause__ or cursor.__context__
    import socket
    import ssl

    if isinstance(exc, httpx.ConnectError):
        if any(isinstance(e, ssl.SSLError) for e in chain) or "SSL" in str(exc) or "TLS" in str(exc):
            return ConnectionFailedError(
                f"TLS handshake with {target} failed: {clip_text(str(exc), 200)}",
                hint="check the URL scheme and the server certificate",
                remedy="tls",
                request_sent=False,
            )
        if (
            any(isinstance(e, socket.gaierror) for e in chain)
            or "name resolution" in str(exc).lower()
            or "name or service not known" in str(exc).lower()
        ):
            return ConnectionFailedError(
                f"cannot resolve the host of {target}: {clip_text(str(exc), 200)}",
                hint='check the host name in the server\'s "url"',
                request_sent=False,
            )
        return ConnectionFailedError(
            f"cannot connect to {target}: {clip_text(str(exc), 200) or 'connection failed'}",
            hint="is the server running and the URL right?",
            request_sent=False,
        )
    if isinstance(exc, (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.CloseError)):
        return ConnectionFailedError(
            f"the connection to {target} broke before the answer was complete: "
            f"{clip_text(str(exc), 200) or type(exc).__name__}",
            request_sent=True,
        )
    return ConnectionFailedError(
        f"HTTP request to {target} failed: {type(exc).__name__}: {clip_text(str(exc), 200)}", request_sent=True
    )


class HttpxBoundary:
    """``with HttpxBoundary(url, deadline):`` the one place httpx exceptions become bkmcp errors
    (``translate_httpx_error``), raised ``from`` the original."""

    __slots__ = ("url", "deadline")

    def __init__(self, url: str, deadline: Deadline) -> None:
        self.url, self.deadline = url, deadline

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: BaseException | None, tb: Any) -> None:
        if exc is None:
            return
        httpx = import_httpx()

        if isinstance(exc, (httpx.HTTPError, httpx.StreamError, httpx.InvalidURL, UnicodeError)):
            raise translate_httpx_error(exc, self.url, self.deadline) from exc


def _shut_down_stream(stream: Any) -> None:
    """Shut an httpcore network stream's socket down: a thread blocked reading it wakes (closing does not)."""
    import socket

    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


class HttpTransport(Transport):
    """Streamable HTTP over one pooled ``httpx.Client`` (keep-alive, no redirects, no cookies, TLS verified);
    many requests may be in flight at once, one POST each. ``client`` injects a client (``httpx.MockTransport``
    in unit tests, or one pool shared by many sessions)."""

    kind = "http"
    has_sessions = True
    shared_stream = False
    alive = True  # each request opens its own stream: nothing to lose between requests
    stdio = None  # no child process

    def __init__(
        self, server: ResolvedServer, *, insecure: bool, log: Log, client: Any = None, die_with_parent: bool = False
    ) -> None:  # no child process: ``die_with_parent`` is moot
        assert server.url is not None
        self.server = server
        self.url = server.url
        self.configured = dict(server.headers)
        self.insecure = insecure
        self.log = log
        self.responses = 0
        self._client: Any = client
        self._own_client = client is None
        self._deliver: Deliver = lambda message, related: False
        self._answer_headers: AnswerHeaders = lambda method, headers: None
        self._closing = False  # stop_requests() ran: requests in flight fail now, none is sent any more
        self._sending: set[object] = set()  # markers of the requests on the wire (stop_requests wakes them)
        self._sending_lock = _thread.allocate_lock()
        self._stopped = _thread.allocate_lock()  # held until stop_requests: a resumption delay waits on it
        self._stopped.acquire()
        self._listener: Any = None  # the thread reading the standalone GET stream (``listen``)

    def attach(self, deliver: Deliver, lost: Lost, answer_headers: AnswerHeaders) -> None:
        self._deliver = deliver
        self._answer_headers = answer_headers

    # -- plumbing --------------------------------------------------------------------------------------

    def _http(self) -> Any:
        if self._closing:  # never a new client for a closed session
            raise ConnectionFailedError("bkmcp closed the session", request_sent=False)
        if self._client is None:
            self._client = new_http_client(self.url, insecure=self.insecure)
        return self._client

    @staticmethod
    def _timeout(deadline: Deadline, cap: float | None = None) -> Any:
        httpx = import_httpx()

        left = deadline.remaining()
        return httpx.Timeout(min(left, cap) if cap else left)

    def _log_request(self, verb: str, headers: list[tuple[str, str]], message: Mapping[str, Any] | None) -> None:
        if not self.log.verbose:
            return
        rpc = ""
        if message is not None:
            rpc = f" [{message.get('method', 'response')}" + (f" id={message['id']}]" if "id" in message else "]")
        shown = ", ".join(f"{k}: {v}" for k, v in redact_headers(headers).items())
        self.log.debug(f"-> {verb} {redact_url(self.url)}{rpc} {{{shown}}}")

    def _log_response(self, response: Any, started: float) -> None:
        self.responses += 1
        if self.log.verbose:
            ctype = response.headers.get("content-type", "-")
            ms = (time.monotonic() - started) * 1000
            self.log.debug(f"<- HTTP {response.status_code} {ctype} ({ms:.0f} ms)")

    def _check_status(self, response: Any, method: str, *, with_session: bool) -> None:
        status = response.status_code
        if 200 <= status < 300:
            return
        target = strip_url_credentials(self.url)
        where = f"server {self.server.name!r} in {self.server.config_file}"
        if 300 <= status < 400:
            location = response.headers.get("location")
            shown = strip_url_credentials(location) if location else "(no Location header)"
            raise ConnectionFailedError(
                f"{target} answered HTTP {status} redirecting to {shown}; bkmcp never follows redirects",
                hint=f'update "url" of {where} if the endpoint moved',
                details={"http_status": status, "location": shown},
                request_sent=True,
            )
        text = self._read_error_body(response)
        message = _decode_error_message(text)
        if status in (401, 403):  # the WWW-Authenticate parameters that say why (a 401's scheme and description too)
            params = parse_www_authenticate(response.headers.get("www-authenticate", ""))
            named = ("resource_metadata", "scope", "error") + (("scheme", "error_description") if status == 401 else ())
            details = {"http_status": status, **{k: v for k, v in params.items() if k in named}}
        if status == 401:
            raise AuthRequiredError(
                f"{target} requires authentication (HTTP 401)"
                + (f": {clip_text(params['error_description'], 200)}" if params.get("error_description") else ""),
                hint=f"fix the headers (or the environment variables they use) of {where}; the credentials are "
                "missing, expired or not accepted",
                details=details,
                request_sent=False,
            )
        if status == 403:
            reason = params.get("error_description") or (
                str(message.error.get("message")) if message is not None and message.error else text.strip()
            )
            raise PermissionDeniedError(
                f"{target} refused the request (HTTP 403)" + (f": {clip_text(reason, 300)}" if reason else ""),
                hint=f"the identity in {where} lacks permission for this server, tool or resource",
                details=details,
                request_sent=False,
            )
        raise status_failure(status, message, text, method, with_session=with_session)

    @staticmethod
    def _read_error_body(response: Any) -> str:
        chunks: list[bytes] = []
        size = 0
        for chunk in response.iter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= _ERROR_BODY_LIMIT:
                break
        return b"".join(chunks)[:_ERROR_BODY_LIMIT].decode("utf-8", "replace")

    # -- the seam --------------------------------------------------------------------------------------

    def send(self, outgoing: Outgoing) -> None:
        message = outgoing.message
        if "method" in message and "id" in message:
            self._request(outgoing)
        else:
            self._post_one_way(outgoing)

    def _request(self, outgoing: Outgoing) -> None:
        """POST one request and deliver every message of its answer until the response to it arrived. A request
        still waiting when ``close()`` runs fails at once with a clear error (sent: its outcome is unknown)."""
        method = str(outgoing.message.get("method"))
        unsent = f"bkmcp closed the session before {method} was sent"
        if self._closing:
            raise ConnectionFailedError(unsent, request_sent=False)
        try:
            self._request_once(outgoing)
        except BkmcpError as exc:
            if not self._closing:
                raise
            if not request_was_sent(exc):  # stopped before its headers went out (``_admit``)
                raise ConnectionFailedError(unsent, request_sent=False) from None
            raise ConnectionFailedError(
                f"bkmcp closed the session while {method} was waiting for its answer", request_sent=True
            ) from None

    def _request_once(self, outgoing: Outgoing) -> None:
        message, rules, deadline, session_id = outgoing.message, outgoing.rules, outgoing.deadline, outgoing.session_id
        request_id = message["id"]
        method = str(message.get("method"))
        headers = build_headers(
            rules, configured=self.configured, message=message, session_id=session_id, extra=outgoing.extra_headers
        )
        body = dump_json(message).encode("utf-8")  # dump_json escapes lone surrogates: always valid UTF-8
        decoder: SseDecoder | None = None
        try:
            timeout = self._timeout(deadline)
        except McpTimeoutError as exc:
            raise exc.copy(request_sent=False) from None
        started = time.monotonic()
        self._log_request("POST", headers, message)
        interrupt = deadline.interrupt  # a warm client's Ctrl-C: the wait for the answer ends at once
        marker = object()  # finds this request's pooled connection (``_shut_pending``)
        hook = interrupt.hook(lambda: self._shut_pending(marker)) if interrupt is not None else None
        try:
            with HttpxBoundary(self.url, deadline):
                with self._http().stream(
                    "POST",
                    self.url,
                    content=body,
                    headers=_wire_headers(headers),
                    timeout=timeout,
                    extensions=self._extensions(marker, sent=False),
                ) as response:
                    if hook is not None and interrupt is not None:
                        interrupt.unhook(hook)
                        hook = interrupt.hook(lambda: _shut_down_stream(response.extensions.get("network_stream")))
                    self._log_response(response, started)
                    self._check_status(response, method, with_session=session_id is not None)
                    self._answer_headers(method, response.headers)  # the core decides what they issue
                    ctype = media_type(response.headers)
                    if response.status_code == 202:  # whatever its content type: an answer with no response
                        ctype = ""
                    if ctype == "text/event-stream":
                        decoder = SseDecoder()
                        for incoming in self._read_sse(response, decoder, deadline):
                            if self._deliver(incoming, request_id):
                                return
                    elif ctype == "application/json" or ctype.endswith("+json"):
                        chunks = []
                        for chunk in response.iter_bytes():  # the budget is checked while a slow body trickles in
                            chunks.append(chunk)
                            deadline.remaining()
                        raw = b"".join(chunks)
                        del chunks
                        for incoming in decode_messages(raw):  # a response for another id is the core's Stray
                            if self._deliver(incoming, request_id):
                                return
                        raise ProtocolError(
                            f"the server's JSON answer to {method} has no response for request id {request_id}"
                        )
                    elif response.status_code == 202 or not ctype:
                        raise ProtocolError(
                            f"the server answered request {method} with HTTP {response.status_code} and no "
                            "JSON-RPC response"
                            + (
                                " (202 Accepted is only for notifications and responses)"
                                if response.status_code == 202
                                else ""
                            )
                        )
                    else:
                        raise ProtocolError(
                            f"the server answered with unsupported content type {ctype!r} "
                            "(expected application/json or text/event-stream)"
                        )
        finally:
            with self._sending_lock:
                self._sending.discard(marker)
            if hook is not None and interrupt is not None:
                interrupt.unhook(hook)
        # The POST's event stream ended before the response (docs/contract.md §5: 2025-11-25 resumption).
        if rules is not None and rules.sse_resumption and decoder is not None and decoder.last_event_id:
            try:
                self._resume(decoder, request_id, rules, deadline, session_id, marker)
            finally:
                with self._sending_lock:
                    self._sending.discard(marker)
            return
        raise ConnectionFailedError(f"the server closed the event stream before answering {method}", request_sent=True)

    def _extensions(self, marker: object, *, sent: bool) -> dict[str, Any]:
        """httpcore extensions of one request: its ``marker`` (``_shut_pending`` finds its connection by it) and a
        trace that admits it onto the wire (``_admit``) just before its headers go out."""

        def trace(event: str, info: Any) -> None:
            if event == "http11.send_request_headers.started":
                self._admit(marker, sent=sent)

        return {"bkmcp_request": marker, "trace": trace}

    def _admit(self, marker: object, *, sent: bool) -> None:
        """The request of ``marker`` is about to send its headers (on a connection it holds): registered for
        ``stop_requests``, or refused once that ran. One lock orders the two, so a request is either woken by it or
        never sent: one that was still connecting, or waiting for a connection, when the session closed included.
        ``sent``: the operation reached the server already (a resumption GET after its POST); ``_request`` words
        the error."""
        with self._sending_lock:
            if not self._closing:
                self._sending.add(marker)
                return
        raise ConnectionFailedError("bkmcp closed the session", request_sent=sent)

    def _shut_pending(self, marker: object) -> None:
        """Wake the thread whose request carries ``marker`` and still awaits its response headers: shut its pooled
        connection's socket down (httpcore 1.0's pool, as ``close`` walks it)."""
        pool = _shaped_pool(self._client)
        if pool is None:
            return
        with pool._optional_thread_lock:  # a connection handed over is this request's alone (``_hand_over_pool``)
            for pending in pool._requests:
                request = getattr(pending, "request", None)
                if getattr(request, "extensions", {}).get("bkmcp_request") is marker:
                    connection = getattr(getattr(pending, "connection", None), "_connection", None)
                    _shut_down_stream(getattr(connection, "_network_stream", None))

    def _read_sse(self, response: Any, decoder: SseDecoder, deadline: Deadline) -> Iterable[Message]:
        for chunk in response.iter_bytes():
            events = decoder.feed(chunk)
            del chunk
            while events:
                event = events.pop(0)
                if event.event != "message":
                    self.log.debug(f"ignoring SSE event of type {clip_text(event.event, 40)!r}")
                    continue
                messages = decode_messages(event.data)
                del event  # the event text goes before its parsed value travels on (50 MB results)
                yield from messages
            deadline.remaining()

    def _resume(
        self,
        decoder: SseDecoder,
        request_id: Any,
        rules: EraRules,
        deadline: Deadline,
        session_id: str | None,
        marker: object,
    ) -> None:
        """GET + Last-Event-ID after the server's ``retry`` delay, until the response or the budget ends."""
        idle = 0
        while True:
            delay = (decoder.retry_ms if decoder.retry_ms is not None else _RESUME_DEFAULT_MS) / 1000
            if delay >= deadline.remaining():
                raise budget_error(
                    f"the server closed the event stream and its retry delay ({delay:g}s) exceeds the time left",
                    deadline.seconds,
                    remedy="retry_delay",
                    hint="allow more time",
                    request_sent=True,
                )
            if self._stopped.acquire(True, delay):  # the session closed during the delay: fail now, not after it
                self._stopped.release()  # the next waiter wakes too
                raise ConnectionFailedError("bkmcp closed the session", request_sent=True)
            last_id = decoder.last_event_id
            assert last_id is not None
            headers = build_headers(
                rules, configured=self.configured, session_id=session_id, accept="text/event-stream", extra=()
            )
            headers.append(("Last-Event-ID", last_id))
            started = time.monotonic()
            with HttpxBoundary(self.url, deadline):
                with self._open_get(headers, deadline, marker) as response:
                    self._log_response(response, started)
                    try:
                        self._check_status(response, "GET", with_session=session_id is not None)
                    except ProtocolError as exc:
                        if exc.http_status is None:
                            raise
                        raise ConnectionFailedError(
                            f"the server closed the event stream early and refused to resume it "
                            f"(GET with Last-Event-ID: HTTP {exc.http_status})",
                            request_sent=True,
                        ) from None
                    ctype = media_type(response.headers)
                    if ctype != "text/event-stream":
                        raise ConnectionFailedError(
                            f"resuming the event stream returned {ctype or 'no content type'}, not text/event-stream",
                            request_sent=True,
                        )
                    for incoming in self._read_sse(response, decoder, deadline):
                        if self._deliver(incoming, request_id):
                            return
            idle = 0 if decoder.last_event_id != last_id else idle + 1
            if idle >= _RESUME_MAX_IDLE:
                raise ConnectionFailedError(
                    "the server keeps closing the resumed event stream without sending anything", request_sent=True
                )

    def _open_get(self, headers: list[tuple[str, str]], deadline: Deadline, marker: object) -> Any:
        """The GET of an event stream (a resumed answer's, or the standalone one), its request logged: the
        response's context manager, entered inside ``HttpxBoundary``."""
        self._log_request("GET", headers, None)
        return self._http().stream(
            "GET",
            self.url,
            headers=_wire_headers(headers),
            timeout=self._timeout(deadline),
            extensions=self._extensions(marker, sent=True),
        )

    def listen(self, rules: EraRules, session_id: str | None, deadline: Deadline) -> None:
        """Open the optional standalone GET stream of a legacy session (docs/contract.md §5): only for a session that
        declared elicitation, so that a question the server sends outside any request's stream (a TypeScript SDK
        server's ``server.request``) reaches bkmcp. Waits (within ``LISTEN_WAIT`` and ``deadline``) until the
        server answered the GET, so that the requests after it find the stream open. Optional on both sides: a
        405, another status or a failure ends it quietly. ``close`` ends it and waits for its thread."""
        import threading

        if self._listener is not None or rules.era != "legacy":
            return
        opened = threading.Event()
        self._listener = threading.Thread(
            target=self._listen, args=(rules, session_id, opened), name="bkmcp-get-stream", daemon=True
        )
        self._listener.start()
        opened.wait(max(0.0, min(LISTEN_WAIT, deadline.remaining())))

    def _listen(self, rules: EraRules, session_id: str | None, opened: Any) -> None:
        marker = object()
        headers = build_headers(rules, configured=self.configured, session_id=session_id, accept="text/event-stream")
        deadline = Deadline(LISTEN_BUDGET)
        try:
            with HttpxBoundary(self.url, deadline):
                with self._open_get(headers, deadline, marker) as response:
                    opened.set()
                    ctype = media_type(response.headers)
                    if response.status_code != 200 or ctype != "text/event-stream":
                        self.log.debug(f"no standalone GET stream (HTTP {response.status_code}); it is optional")
                        return
                    for incoming in self._read_sse(response, SseDecoder(), deadline):
                        self._deliver(incoming, None)
        except Exception as exc:  # the stream is optional: its end is never the operation's error
            self.log.debug(f"the standalone GET stream ended ({type(exc).__name__})")
        finally:
            opened.set()
            with self._sending_lock:
                self._sending.discard(marker)

    def _post_one_way(self, outgoing: Outgoing) -> None:
        """POST a notification or a response; expects 202 (any 2xx accepted)."""
        message, deadline, session_id = outgoing.message, outgoing.deadline, outgoing.session_id
        headers = build_headers(outgoing.rules, configured=self.configured, message=message, session_id=session_id)
        started = time.monotonic()
        self._log_request("POST", headers, message)
        what = str(message.get("method", "a response"))
        try:
            with HttpxBoundary(self.url, deadline):
                with self._http().stream(
                    "POST",
                    self.url,
                    content=dump_json(message).encode("utf-8"),
                    headers=_wire_headers(headers),
                    timeout=self._timeout(deadline),
                ) as response:
                    self._log_response(response, started)
                    if outgoing.strict:
                        self._check_status(response, what, with_session=session_id is not None)
        except BkmcpError as exc:
            if outgoing.strict:
                raise
            self.log.debug(f"sending {what} failed: {exc.message}")

    def failure(self, method: str, *, sent: bool) -> BkmcpError:  # pragma: no cover - a race with close()
        """HTTP has no shared stream to lose: only ``McpSession.close`` comes here, for a request still registered
        when the session closes (its POST not yet returned, or its answer still awaited)."""
        return ConnectionFailedError(f"no response to {method}", request_sent=sent)

    def timeout_error(self, method: str, deadline: Deadline) -> BkmcpError:
        return budget_error(
            f"no answer to {method} from {strip_url_credentials(self.url)}", deadline.seconds, request_sent=True
        )

    def end_session(self, deadline: Deadline, rules: EraRules | None = None, session_id: str | None = None) -> None:
        """DELETE the legacy session ``session_id`` (405 is fine); best effort, never raises."""
        if session_id is None or self._client is None:
            return
        headers = build_headers(rules, configured=self.configured, session_id=session_id)
        started = time.monotonic()
        self._log_request("DELETE", headers, None)
        try:
            with HttpxBoundary(self.url, deadline):
                response = self._client.request(
                    "DELETE", self.url, headers=_wire_headers(headers), timeout=self._timeout(deadline, cap=2.0)
                )
            self._log_response(response, started)
        except BkmcpError as exc:
            self.log.debug(f"ending the session failed: {type(exc).__name__}")

    def close_idle_connections(self) -> int:
        """Close the pooled keep-alive connections nobody holds (the MCP session itself stays: the next request opens
        a new connection); how many were closed. They leave the pool under its lock, so none can be handed to a
        request meanwhile; one already handed to a request that has not started on it yet (still IDLE) is that
        request's (``_hand_over_pool``)."""
        pool = _shaped_pool(self._client)
        if pool is None:
            return 0
        with pool._optional_thread_lock:
            held = {id(r.connection) for r in pool._requests if r.connection is not None}
            idle = {id(c): c for c in pool._connections if id(c) not in held and c.is_idle()}
            pool._connections = [c for c in pool._connections if id(c) not in idle]
        closed = 0
        for connection in idle.values():
            try:
                connection.close()
                closed += 1
            except Exception as exc:  # best effort: out of the pool, whatever state it is in
                self.log.debug(f"closing an idle connection failed: {type(exc).__name__}")
        return closed

    def stop_requests(self) -> None:
        """Fail every request in flight now, each with a clear error, and send none any more (the first step of
        closing the session, before the DELETE that ends it): the sockets of those on the wire are shut down
        (closing a socket does not wake a thread blocked reading it); one still connecting or waiting for a
        connection is refused before it sends anything (``_admit``). Idempotent."""
        with self._sending_lock:
            stopping, self._closing = not self._closing, True
            sending = list(self._sending)
        if stopping:
            self._stopped.release()  # wakes the requests waiting out a resumption delay
        for marker in sending:
            self._shut_pending(marker)

    def close(self, deadline: Deadline | None = None) -> None:
        """``stop_requests``, then close the pool (an injected one is someone else's: left open)."""
        self.stop_requests()
        pool = _shaped_pool(self._client) if self._own_client else None
        if pool is not None:  # a one-way POST still on the wire too (``stop_requests`` knows requests only)
            with pool._optional_thread_lock:
                connections = list(pool._connections)
            for connection in connections:
                _shut_down_stream(getattr(getattr(connection, "_connection", None), "_network_stream", None))
        if self._listener is not None:  # woken by the shutdown above (or stop_requests): gone before close returns
            self._listener.join(LISTEN_WAIT)
        if self._client is not None and self._own_client:
            try:
                self._client.close()
            finally:
                self._client = None


LISTEN_WAIT = 2.0  # seconds: at most this for the server to answer the standalone GET, and for its thread to end
LISTEN_BUDGET = 24 * 3600.0  # the standalone GET stream lives as long as the session (closed with it)


def _decode_error_message(text: str) -> Message | None:
    """The JSON-RPC message in an error body, if there is one."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        messages = decode_messages(stripped)
    except ProtocolError:
        return None
    return messages[0] if len(messages) == 1 else None


# -- 6.3 stdio framing: the bounded line reader and the stderr tail (docs/contract.md §9) ------------------------------

STDIO_EXIT_GRACE = 2.0  # after closing stdin: time to exit on its own
STDIO_QUICK_EXIT_GRACE = 0.5  # the same once the operation's budget is spent
STDIO_TERM_GRACE = 2.0  # after SIGTERM to the process group, before SIGKILL
STDIO_POLL = 0.1  # how often a write waiting for the child to read also checks whether it is still alive
STDIO_STDERR_TAIL = 20  # stderr lines kept (without -v) for error details
STDIO_LINE_CLIP = 500
STDIO_STDOUT_TAIL = 5  # skipped stdout lines (not JSON-RPC) kept for error details
STDIO_LINE_LIMIT = 64 * 1024 * 1024  # bytes of one line on a stdio server's stdout (docs/contract.md §9)
STDIO_READ_LINE = 8192  # a stderr line longer than this is taken in pieces
PR_SET_PDEATHSIG = 1
_READ_CHUNK = 64 * 1024
_TOO_LONG_HEAD = 4096  # bytes of an overlong line kept to say what it was


def read_lines(
    stream: Any,
    on_line: Callable[[bytes], None],
    on_too_long: Callable[[bytes], None],
    *,
    limit: int,
    stop: Any = None,
    on_too_long_end: Callable[[bytes], None] | None = None,
) -> None:
    """A bounded line reader (the resident's stdin, a stdio server's stdout): ``stream`` in 64 KiB chunks, each
    complete line to ``on_line`` (the last one at EOF too, without its newline), until EOF or ``stop`` (an Event)
    is set after a chunk. A line longer than ``limit`` bytes is skipped: ``on_too_long`` gets its first bytes as
    soon as it passes the limit, and the rest of it is read and dropped up to its newline, so memory stays
    bounded however long a line grows; ``on_too_long_end`` (if given) gets its last bytes at its newline. Reads
    the descriptor itself when there is one: a thread blocked in a buffered read would hold the buffer's lock when
    the interpreter exits (a fatal error)."""
    try:
        fd: int | None = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a file (in-process tests)
        fd = None
    read = (lambda size: os.read(fd, size)) if fd is not None else (getattr(stream, "read1", None) or stream.read)
    buffer = bytearray()
    skipping = False
    while stop is None or not stop.is_set():
        chunk = read(_READ_CHUNK)
        if not chunk:
            if buffer and not skipping:
                on_line(bytes(buffer))
            return
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            piece = chunk[start : end if end >= 0 else len(chunk)]
            if not skipping:
                buffer += piece
                if len(buffer) > limit:
                    head = bytes(buffer[:_TOO_LONG_HEAD])
                    del buffer[:-_TOO_LONG_HEAD]  # its last bytes stay: what ``on_too_long_end`` gets
                    skipping = True
                    on_too_long(head)
            elif on_too_long_end is not None:
                buffer += piece
                del buffer[:-_TOO_LONG_HEAD]
            if end < 0:
                break
            if not skipping:
                on_line(bytes(buffer))
            elif on_too_long_end is not None:
                on_too_long_end(bytes(buffer))
            buffer.clear()
            skipping = False
            start = end + 1


class LineTail:
    """The last ``keep`` lines of one of a child's streams and how many it wrote: what an error quotes. Once
    ``mark_started`` noted the child's start-up, ``tail(since)`` answers for an operation on a kept child that
    began at ``position()``: its start-up lines and its own, as a child started for it alone would have told it
    (docs/contract.md §14); ``since`` None: every line."""

    def __init__(self, keep: int) -> None:
        import collections

        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._count = 0
        self._startup: list[str] | None = None
        self._started_at = 0
        self._lock = _thread.allocate_lock()

    def add(self, line: str) -> None:
        self.extend([line], 1)

    def extend(self, lines: Iterable[str], count: int) -> None:
        """``count`` lines written, of which ``lines`` are the last kept (another tail's ``tail()``)."""
        with self._lock:
            self._lines.extend(lines)
            self._count += count

    def position(self) -> int:
        with self._lock:
            return self._count

    def mark_started(self) -> None:
        with self._lock:
            if self._startup is None:
                self._startup, self._started_at = list(self._lines), self._count

    def tail(self, since: int | None = None) -> tuple[list[str], int]:
        """(the last lines, how many lines there were) for an operation that began at ``since``."""
        with self._lock:
            lines, keep = list(self._lines), self._lines.maxlen or 0
            if since is None or self._startup is None or since <= self._started_at:
                return lines, self._count
            own = self._count - since
            return (self._startup + lines[max(len(lines) - own, 0) :])[-keep:], self._started_at + own


# -- 6.4 the child process: spawning, its group, reaping, StdioTransport (docs/contract.md §9) -------------------------
# ``ChildProcess`` starts a stdio server in its own process group (with the environment section 4's
# ``select_inherited_env`` chose), watches it and reaps it; ``StdioTransport`` writes JSON-RPC lines to it, skips
# stdout lines that are not JSON-RPC and puts the server's stderr tail into its errors (``_with_stderr``). A
# resident session's crashed child is restarted after a back-off (10.2, ``SessionPool``). ``open_transport``, the
# seam's one entry, ends the section: its table names both transports.


def _pipe_unread(fd: int) -> int | None:
    """Bytes waiting in the pipe that ``fd`` is an end of (``FIONREAD``), or None where that cannot be asked."""
    try:
        import array
        import fcntl
        import termios

        count = array.array("i", [0])
        fcntl.ioctl(fd, termios.FIONREAD, count, True)
    except (ImportError, AttributeError, OSError):  # Windows (no fcntl), a closed descriptor
        return None
    return int(count[0])


_WRITE_END_COUNTS: list[bool] = []  # asked once per process (``_write_end_counts``)


def _write_end_counts() -> bool:
    """Whether ``FIONREAD`` on a pipe's WRITE end counts what its reader has not taken yet (Linux does; a system
    whose answer is always 0 would make every server look as if it read at once). Asked once, of a pipe of ours."""
    if not _WRITE_END_COUNTS:
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, b"x")
            _WRITE_END_COUNTS.append(_pipe_unread(write_end) == 1)
        finally:
            os.close(read_end)
            os.close(write_end)
    return _WRITE_END_COUNTS[0]


class _Spawner:
    """Starts children from one thread that lives as long as the process: ``PR_SET_PDEATHSIG`` fires when the
    *thread* that forked a child exits, so a child spawned from a short-lived worker thread would be killed with
    it (docs/contract.md §11.5). Used when a child must not outlive bkmcp (``die_with_parent``)."""

    _lock = _thread.allocate_lock()
    _instance: _Spawner | None = None

    def __init__(self) -> None:
        import queue
        import threading

        self._jobs: queue.Queue[Any] = queue.Queue()
        threading.Thread(target=self._run, name="bkmcp-spawner", daemon=True).start()

    @classmethod
    def shared(cls) -> _Spawner:
        with cls._lock:
            if cls._instance is None:
                cls._instance = cls()
            return cls._instance

    def _run(self) -> None:
        while True:
            job, done, box = self._jobs.get()
            try:
                box.append(job())
            except BaseException as exc:  # noqa: B036 - handed back to the caller's thread
                box.append(exc)
            done.set()

    def call(self, job: Callable[[], Any]) -> Any:
        import threading

        done = threading.Event()
        box: list[Any] = []
        self._jobs.put((job, done, box))
        done.wait()
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


# The group watchdog's program (``_GroupWatchdog``): it reads "+PGID" / "-PGID" lines from its stdin, a pipe whose
# only write end bkmcp holds, and at EOF (bkmcp ended, however) SIGKILLs every group still recorded.
_WATCHDOG_PROGRAM = """
import os, signal
for s in (signal.SIGINT, signal.SIGHUP):
    signal.signal(s, signal.SIG_IGN)
groups, pending = set(), b""
while True:
    chunk = os.read(0, 4096)
    if not chunk:
        break
    *lines, pending = (pending + chunk).split(b"\\n")
    for line in lines:
        (groups.add if line[:1] == b"+" else groups.discard)(int(line[1:]))
for group in groups:
    try:
        os.killpg(group, signal.SIGKILL)
    except OSError:
        pass
"""


class _GroupWatchdog:
    """One small process per bkmcp process that kills the process groups of its stdio children when bkmcp dies,
    SIGKILL included (docs/contract.md §11.5, §14): ``PR_SET_PDEATHSIG`` reaches a direct child only, and a
    server's own children (``npx`` -> ``node``, workers) stay in its group. A child records its group itself,
    before ``exec`` (``_die_with_parent_hook``), so no window is left between its start and its record; bkmcp
    strikes it off once the group is gone and its leader reaped (a pid is reused only after that). Started on
    the first such child, never on the one-shot CLI's path; a watchdog that was killed is replaced at the next
    child, and told the groups bkmcp knows (kept here too: ``recorded``)."""

    _lock = _thread.allocate_lock()
    _write_end: int | None = None
    _proc: Any = None  # its Popen: polled (and so reaped) only through it, never by a bare waitpid on a reusable pid
    _started = False
    _groups: set[int] = set()

    @classmethod
    def write_end(cls) -> int | None:
        """The descriptor children record their group on, starting the watchdog if none runs; None where it
        cannot run (no interpreter path, the spawn failed): then ``PR_SET_PDEATHSIG`` alone holds. A former
        watchdog's write end stays open: a hook made before may still write to it (an error there is harmless,
        a reused descriptor number would not be)."""
        with cls._lock:
            if cls._proc is not None and cls._proc.poll() is not None:
                cls._started = False
            if not cls._started:
                cls._started = True
                started = cls._start()
                cls._proc, cls._write_end = started if started is not None else (None, None)
                if cls._groups:
                    cls._send(b"".join(b"+%d\n" % group for group in cls._groups))
            return cls._write_end

    @classmethod
    def _send(cls, data: bytes) -> None:
        if cls._write_end is not None:
            try:
                os.write(cls._write_end, data)
            except OSError:  # the watchdog was killed: the next child starts another
                pass

    @classmethod
    def recorded(cls, pgid: int) -> None:
        """Group ``pgid`` started (its hook recorded it, maybe with a watchdog replaced since): bkmcp's own
        record, told to the current watchdog too."""
        with cls._lock:
            cls._groups.add(pgid)
            cls._send(b"+%d\n" % pgid)

    @staticmethod
    def _start() -> tuple[Any, int] | None:
        """A new watchdog: (its Popen, the write end of its pipe). It starts with 0, 1 and 2 open and nothing else
        (``close_fds``): a descriptor bkmcp inherited (a caller's lock, a pipe) is never held for its life."""
        import subprocess

        if not sys.executable:  # pragma: no cover - an embedded interpreter
            return None
        read_end, write_end = os.pipe()  # both close-on-exec: no other child holds the write end past its exec
        try:
            proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-c", _WATCHDOG_PROGRAM],
                stdin=read_end,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env={},
                close_fds=True,
                start_new_session=True,  # a terminal's signals to bkmcp's group do not reach it
            )
        except OSError:  # pragma: no cover - no process to be had: PR_SET_PDEATHSIG still covers the direct child
            os.close(write_end)
            return None
        finally:
            os.close(read_end)
        return proc, write_end

    @classmethod
    def forget(cls, pgid: int) -> None:
        """Strike group ``pgid`` off: it is gone and its leader reaped."""
        with cls._lock:
            cls._groups.discard(pgid)
            cls._send(b"-%d\n" % pgid)


def _die_with_parent_hook() -> Callable[[], None] | None:
    """A ``preexec_fn`` that makes the child receive SIGKILL when bkmcp dies (Linux ``prctl``) and records its
    process group with the group watchdog (its descendants die then too), or None."""
    if not sys.platform.startswith("linux"):
        return None  # pragma: no cover - elsewhere the resident mode's own shutdown paths reap the children
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):  # pragma: no cover - a libc without prctl
        return None
    import signal

    parent = os.getpid()
    kill = int(signal.SIGKILL)
    watchdog = _GroupWatchdog.write_end()

    def hook() -> None:
        prctl(PR_SET_PDEATHSIG, kill, 0, 0, 0)
        if os.getppid() != parent:  # bkmcp died between fork and prctl
            os._exit(1)
        if watchdog is not None:  # after setsid (``start_new_session``): our pid is our group
            # SIGPIPE is back to its default here: a killed watchdog must cost this child nothing but the record
            blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGPIPE])
            try:
                os.write(watchdog, b"+%d\n" % os.getpid())
            except OSError:
                signal.sigtimedwait([signal.SIGPIPE], 0)  # the pending SIGPIPE, taken before it is unblocked
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    return hook


def _path_problem(path: str, otherwise: str) -> str:
    """Why a stdio ``command`` or ``cwd`` path cannot be used: ``otherwise`` when it exists, else "does not exist"
    or, when a folder on its way cannot be searched by this user, permission denied (``os.path.exists`` says False
    for both)."""
    try:
        os.stat(path)
    except PermissionError:
        return "cannot be reached: permission denied (a folder on its path is not searchable by this user)"
    except OSError:
        return "does not exist"
    return otherwise


class ChildProcess:
    """Supervision of one stdio server process (contract.md §9, §11.5), apart from its framing: spawn without a shell in
    its own process group (optionally dying with bkmcp), keep the last stderr lines (streamed with ``-v``; counted, and
    those of its start-up kept apart, so that an operation on a kept child can be told only its own), know its exit
    status, and stop it with the shutdown ladder — close stdin, wait; SIGTERM the group, wait; SIGKILL — always reaping
    the whole group."""

    def __init__(self, server: ResolvedServer, log: Log, *, die_with_parent: bool = False) -> None:
        self.server = server
        self.log = log
        self.die_with_parent = die_with_parent
        self.proc: Any = None
        self.pid: int | None = None
        self.returncode: int | None = None  # of the last child, once it was reaped
        self.spawns = 0
        self._stderr_reader: Any = None
        self._stderr = LineTail(STDIO_STDERR_TAIL)  # the current child's (a new one per spawn)
        self._stderr_lock = _thread.allocate_lock()
        # The era probe's stderr (docs/contract.md §5): bytes taken from the pipe so far; while the probe is open,
        # the lines written after the server read it wait apart (the last ``STDIO_STDERR_TAIL``, and how many);
        # once it was rejected, lines ending at or before ``_probe_end`` (a byte offset) were written for it.
        self._stderr_taken = 0
        self._probe_open = False
        self._probe_lines = LineTail(STDIO_STDERR_TAIL)
        self._probe_end: int | None = None

    def where(self) -> str:
        return f"server {self.server.name!r} in {self.server.config_file}"

    def _executable(self, env: Mapping[str, str]) -> str:
        """``command`` as a path to run: looked up on the child's PATH unless it names a path itself."""
        import shutil

        command = self.server.command or ""
        if os.sep in command or (os.altsep and os.altsep in command):
            path = os.path.join(self.server.cwd or os.getcwd(), command)  # resolve_server made it absolute
            found = path if os.path.isfile(path) and os.access(path, os.X_OK) else None
            problem = _path_problem(path, "is not an executable file")
        else:
            found = shutil.which(command, path=env.get("PATH", os.defpath))
            problem = "was not found on PATH"
        if found is None:
            raise ConnectionFailedError(
                f"cannot start the stdio server: command {command!r} {problem}",
                hint=f'install it, or set "command" of {self.where()} to an absolute path of an executable '
                "(PATH comes from bkmcp's environment or the entry's \"env\")",
                details={"command": command},
                request_sent=False,
            )
        return found

    def spawn(self) -> Any:
        """Start the child; returns the ``Popen`` (stdin/stdout pipes for the framing)."""
        import subprocess
        import threading

        env = {**self.server.inherited_env, **self.server.env}
        executable = self._executable(env)
        cwd = self.server.cwd
        if cwd is not None and not os.path.isdir(cwd):
            problem = _path_problem(cwd, "is not a directory")
            raise ConnectionFailedError(
                f"cannot start the stdio server: working directory {cwd!r} {problem}",
                hint=f'fix "cwd" of {self.where()}',
                request_sent=False,
            )
        argv = [executable, *self.server.args]
        if self.log.verbose:
            shown = " ".join(repr(a) if (not a or any(c.isspace() for c in a)) else a for a in argv)
            self.log.debug(
                f"spawning stdio server: {shown} (cwd: {cwd or os.getcwd()}; "
                f"env: {', '.join(sorted(env)) or '(empty)'})"
            )
        pipe = subprocess.PIPE
        options: dict[str, Any] = {"stdin": pipe, "stdout": pipe, "stderr": pipe, "env": env, "cwd": cwd}
        if os.name == "posix":
            options["start_new_session"] = True  # own process group: the whole tree can be signalled
        else:  # pragma: no cover - Windows
            options["creationflags"] = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
        hook = _die_with_parent_hook() if self.die_with_parent else None
        if hook is not None:
            options["preexec_fn"] = hook

        def popen() -> Any:
            return subprocess.Popen(argv, close_fds=True, **options)

        try:
            proc = _Spawner.shared().call(popen) if hook is not None else popen()
        except OSError as exc:
            if is_exhaustion(exc):  # no descriptor, process or memory to be had: a limit, not a bug
                raise ResourceLimitError(
                    f"cannot start the stdio server {self.server.command!r}: {exc.strerror or exc} (a system "
                    "limit on open files, processes or memory is reached)",
                    request_sent=False,
                ) from exc
            raise ConnectionFailedError(
                f"cannot start the stdio server {self.server.command!r}: {exc.strerror or exc}",
                hint=f'check "command" and "args" of {self.where()} (an interpreter named by a #! line must exist too)',
                request_sent=False,
            ) from exc
        if hook is not None:
            _GroupWatchdog.recorded(proc.pid)
        self.proc = proc
        self.spawns += 1
        self.pid = proc.pid
        self.returncode = None
        with self._stderr_lock:  # error details describe the current child
            self._stderr = LineTail(STDIO_STDERR_TAIL)
            self._stderr_taken, self._probe_open, self._probe_end = 0, False, None
            self._probe_lines = LineTail(STDIO_STDERR_TAIL)
        self._stderr_reader = threading.Thread(
            target=self._read_stderr, args=(proc.stderr,), name="bkmcp-stdio-err", daemon=True
        )
        self._stderr_reader.start()
        self.log.debug(f"stdio server started (pid {proc.pid})")
        return proc

    def _read_stderr(self, stream: Any) -> None:
        """Reads the pipe itself (not through a buffer), counting every byte taken: where a line ends in the stream
        tells the probe's lines from later ones (``close_probe``)."""
        import select

        poll = getattr(select, "poll", None)  # not select(): a resident's descriptors go beyond FD_SETSIZE
        readable = poll() if poll is not None else None
        pending, ended_at = b"", 0  # a line not complete yet; the stream offset where the last line ended
        try:
            fd = stream.fileno()
            if readable is not None:
                readable.register(fd, select.POLLIN)
            while True:
                if readable is not None:
                    readable.poll()  # readable or at its end: the read below never waits with the lock held
                    with self._stderr_lock:  # taken and counted at once: ``close_probe`` sees both or neither
                        chunk = os.read(fd, 65536)
                        self._stderr_taken += len(chunk)
                else:  # pragma: no cover - Windows: no poll() on pipes (nor FIONREAD: the probe's end is approximate)
                    chunk = os.read(fd, 65536)
                    with self._stderr_lock:
                        self._stderr_taken += len(chunk)
                pending += chunk
                while pending:
                    cut = pending.find(b"\n", 0, STDIO_READ_LINE) + 1
                    if not cut and chunk and len(pending) < STDIO_READ_LINE:
                        break  # the rest of the line is still to come
                    raw, pending = pending[: cut or STDIO_READ_LINE], pending[cut or STDIO_READ_LINE :]
                    ended_at += len(raw)
                    self._take_stderr(
                        clip_text(raw.decode("utf-8", "replace").rstrip("\r\n"), STDIO_LINE_CLIP), ended_at
                    )
                if not chunk:
                    return
        except (OSError, ValueError):
            pass

    def _take_stderr(self, line: str, ended_at: int) -> None:
        """One stderr line that ends at stream offset ``ended_at``: the probe's (shown marked with ``-v``; kept apart
        from the tail) or the tail's."""
        scrubbed = self.log.redactor.scrub(line)
        with self._stderr_lock:
            probe = self._probe_end is not None and ended_at <= self._probe_end
            if not probe and self._probe_open:
                probe = not self.unread_input()  # it was read (or that cannot be told): a line in answer to it
            if not probe:
                self._stderr.add(scrubbed)
            elif self._probe_open:  # its fate waits for the probe's (``close_probe``)
                self._probe_lines.add(scrubbed)
        if self.log.verbose:
            self.log.debug(f"[server stderr{', era probe' if probe else ''}] {line}")

    def keep_stderr(self, line: str) -> None:
        """One stderr line of the current child (the reader's, already clipped and scrubbed)."""
        self._stderr.add(line)

    def unread_input(self) -> int | None:
        """Bytes written to the child's stdin that it has not read yet; None when that cannot be told (no child, or
        no ``FIONREAD`` on a pipe's write end here)."""
        proc = self.proc
        if proc is None or not _write_end_counts():
            return None
        try:
            return _pipe_unread(proc.stdin.fileno())
        except ValueError:  # closed
            return None

    def open_probe(self) -> None:
        """The era probe was just written: what the child writes to stderr once it has read it is the probe's."""
        with self._stderr_lock:
            self._probe_open, self._probe_end = True, None
            self._probe_lines = LineTail(STDIO_STDERR_TAIL)

    def close_probe(self, rejected: bool) -> None:
        """The probe was rejected (an error answer: the legacy server's complaint), accepted or given up. Rejected:
        the stderr written up to now (what the reader took plus what still waits in the pipe: a server logs before
        it answers) was the probe's, and leaves the tail. Accepted (its lines are the server's log of a request like
        any other) or given up (nothing shows those lines were about the probe): the tail keeps them."""
        with self._stderr_lock:
            if not self._probe_open:
                return
            self._probe_open = False
            if rejected:
                proc = self.proc
                waiting = _pipe_unread(proc.stderr.fileno()) if proc is not None else None
                self._probe_end = self._stderr_taken + (waiting or 0)
            else:
                self._stderr.extend(*self._probe_lines.tail())
            self._probe_lines = LineTail(STDIO_STDERR_TAIL)

    def stderr_position(self) -> int:
        """How many stderr lines the current child wrote so far: where an operation on it began (``stderr_tail``)."""
        return self._stderr.position()

    def mark_started(self) -> None:
        """The child has started (its handshake is over): the lines so far are its start-up lines. Once per child."""
        self._stderr.mark_started()

    def stderr_tail(self, since: int | None = None) -> list[str]:
        """The last stderr lines (at most ``STDIO_STDERR_TAIL``). With ``since`` (a ``stderr_position`` taken after
        ``mark_started``) only the start-up lines and those written from there on: what an operation that began at
        ``since`` would have been told by a child started for it alone (docs/contract.md §14)."""
        return self._stderr.tail(since)[0]

    def exit_status(self, wait: float) -> int | None:
        """The exit status, waiting up to ``wait`` seconds; None while it runs. Its last stderr lines explain an
        exit, so the stderr reader gets a moment to collect them."""
        import subprocess

        if self.proc is None:
            return None
        try:
            status = int(self.proc.wait(timeout=max(wait, 0)))
        except subprocess.TimeoutExpired:
            return None
        if self._stderr_reader is not None:
            self._stderr_reader.join(0.5)
        self.returncode = status
        return status

    def describe_exit(self, status: int | None) -> str:
        if status is None:
            return "closed its stdout"
        if status < 0:
            import signal

            try:
                name = signal.Signals(-status).name
            except ValueError:
                name = f"signal {-status}"
            return f"was killed by {name}"
        return f"exited with status {status}"

    def stop(self, *, quick: bool = False, stdin_busy: bool = False, readers: Iterable[Any] = ()) -> None:
        """The shutdown ladder (docs/contract.md §9); ``quick`` shortens the first grace (the budget is spent)."""
        proc = self.proc
        if proc is None:
            return
        self.proc = None
        import signal
        import subprocess

        if not stdin_busy:  # a write blocked on a full pipe keeps stdin open anyway: go straight to signals
            try:
                proc.stdin.close()
            except OSError:
                pass
        grace = STDIO_QUICK_EXIT_GRACE if quick else STDIO_EXIT_GRACE
        try:
            status: int | None = proc.wait(timeout=0 if stdin_busy else grace)
        except subprocess.TimeoutExpired:
            status = None
        if status is None:
            self.log.debug(f"the stdio server did not exit within {grace:g}s of closing its stdin; sending SIGTERM")
        # Signal the group even after a clean exit of the leader: grandchildren must not outlive the operation.
        if self._signal_group(proc, signal.SIGTERM) and not self._wait_group(proc, STDIO_TERM_GRACE):
            self.log.debug("the stdio server ignored SIGTERM; sending SIGKILL")
            self._signal_group(proc, getattr(signal, "SIGKILL", signal.SIGTERM))
            self._wait_group(proc, STDIO_TERM_GRACE)
        try:
            status = proc.wait(timeout=STDIO_TERM_GRACE)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            status = None
        self.returncode = status
        if self.die_with_parent and status is not None and not self.group_running(proc.pid):
            _GroupWatchdog.forget(proc.pid)  # a group left running stays recorded: it dies with bkmcp
        self.log.debug(f"stdio server stopped (pid {proc.pid}, status {status})")
        threads = [t for t in (*readers, self._stderr_reader) if t is not None]
        for thread in threads:
            thread.join(0.5)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            # A reader still blocked (a detached grandchild holds the pipe) keeps its stream: closing it would block.
            if stream is not None and not any(t.is_alive() for t in threads):
                try:
                    stream.close()
                except OSError:
                    pass

    @staticmethod
    def _signal_group(proc: Any, signum: int) -> bool:
        """Send ``signum`` to the child's process group; False when nothing is left to signal."""
        killpg = getattr(os, "killpg", None)
        try:
            if killpg is not None:
                killpg(proc.pid, signum)
            elif proc.poll() is None:  # pragma: no cover - Windows: no process groups to signal
                proc.terminate()
            else:  # pragma: no cover
                return False
        except (ProcessLookupError, PermissionError):
            return False
        return True

    @staticmethod
    def group_running(pgid: int) -> bool:
        """Whether a process of group ``pgid`` still runs. Zombies do not count: an orphaned grandchild that
        died waits for init to reap it, which some container inits do only every few seconds."""
        killpg = getattr(os, "killpg", None)
        if killpg is None:  # pragma: no cover - Windows
            return False
        try:
            killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        if not os.path.isdir("/proc/self"):  # pragma: no cover - no procfs: count the group as running
            return True
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as handle:
                    fields = handle.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if len(fields) > 2 and fields[2] == str(pgid).encode() and fields[0] not in (b"Z", b"X"):
                return True
        return False

    def _wait_group(self, proc: Any, seconds: float) -> bool:
        """Wait until the leader is reaped and no process of its group runs; True when all are gone."""
        end = time.monotonic() + seconds
        while True:
            if proc.poll() is not None and not self.group_running(proc.pid):
                return True
            if time.monotonic() >= end:
                return False
            time.sleep(0.05)


class StdioTransport(Transport, StdioPart):
    """A stdio server (docs/contract.md §9, docs/protocol.md §1.4): newline-delimited JSON-RPC over one child's pipes.

    The child (``ChildProcess``) is spawned on the first message. One reader thread turns stdout into messages
    and delivers each to the session, which matches it by id, so any number of requests may be in flight; writes
    are serialised and bounded by the caller's deadline (a child that stops reading cannot hang bkmcp). A line that
    is not JSON-RPC (a banner, a log line) is skipped and counted, its last few kept for errors (``_skipped``);
    when the child exits, ``lost()`` fails every request in flight on it.
    """

    kind = "stdio"
    has_sessions = False
    shared_stream = True

    def __init__(self, server: ResolvedServer, *, insecure: bool, log: Log, die_with_parent: bool = False) -> None:
        assert server.command is not None
        self.server = server
        self.log = log
        self.child = ChildProcess(server, log, die_with_parent=die_with_parent)
        self.responses = 0
        self._deliver: Callable[[Message, Any], bool] = lambda message, related: False
        self._lost: Lost = lambda *unreadable: None
        self._write_lock = _thread.allocate_lock()
        self._start_lock = _thread.allocate_lock()
        self._reader: Any = None
        self._skipped = LineTail(STDIO_STDOUT_TAIL)  # the current child's stdout lines that were not JSON-RPC
        self._ended = False  # the current child's stdout ended (it exited or closed it)
        self._sent_at = 0.0
        self._spent = False
        self._closing = False  # close() ran: no child starts any more, and requests cut short say bkmcp closed it
        self._probe_next = False  # the next message written is the era probe (``probe_begins``)

    def attach(self, deliver: Deliver, lost: Lost, answer_headers: AnswerHeaders) -> None:
        self._deliver = deliver
        self._lost = lost

    @property
    def stdio(self) -> StdioTransport:
        return self

    @property
    def pid(self) -> int | None:
        return self.child.pid

    @property
    def exit_status(self) -> int | None:
        """The child's exit status once it exited (None while it runs, or before the first spawn)."""
        proc = self.child.proc
        return proc.poll() if proc is not None else self.child.returncode

    @property
    def spawns(self) -> int:
        return self.child.spawns

    def stderr_tail(self, since: int | None = None) -> list[str]:
        return self.child.stderr_tail(since)

    def stderr_position(self) -> int | None:
        return self.child.stderr_position()

    def mark_started(self) -> None:
        self.child.mark_started()
        self._skipped.mark_started()

    def stdout_skipped(self, since: int | None = None) -> tuple[list[str], int]:
        return self._skipped.tail(since)

    def stdout_position(self) -> int | None:
        return self._skipped.position()

    def unread_input(self) -> int | None:
        return self.child.unread_input()

    def probe_begins(self) -> None:
        self._probe_next = True  # the probe's stderr starts once it is written (``send``), on the child it spawns

    def probe_ends(self, rejected: bool) -> None:
        self._probe_next = False
        self.child.close_probe(rejected)

    @property
    def alive(self) -> bool:
        """The child is running and its stdout is open (False before the first spawn)."""
        proc = self.child.proc
        return proc is not None and not self._ended and proc.poll() is None

    def _start(self) -> None:
        import threading

        with self._start_lock:
            if self.child.proc is not None:
                return
            if self._closing:  # closed while a request was on its way (a shutdown during the start)
                raise ConnectionFailedError("bkmcp closed the stdio server before it started", request_sent=False)
            proc = self.child.spawn()
            self._ended = False
            self._skipped = skipped = LineTail(STDIO_STDOUT_TAIL)  # error details describe the current child
            if os.name == "posix":
                os.set_blocking(proc.stdin.fileno(), False)  # writes wait in select(), bounded by the deadline
            self._reader = threading.Thread(
                target=self._read_stdout, args=(proc, skipped), name="bkmcp-stdio-out", daemon=True
            )
            self._reader.start()
            threading.Thread(target=self._watch_exit, args=(proc,), name="bkmcp-stdio-wait", daemon=True).start()

    # -- reading ---------------------------------------------------------------------------------------

    def _read_stdout(self, proc: Any, skipped: LineTail) -> None:
        """Lines of one child's stdout (bounded: ``STDIO_LINE_LIMIT``); each JSON-RPC message to the session, any
        other line skipped (docs/contract.md §9: servers print banners and logs there; the SDKs' clients skip them)."""

        def on_line(line: bytes) -> None:
            if not line.strip():
                return
            try:
                messages = decode_messages(line)
            except ProtocolError as exc:  # the one judgement of what is JSON-RPC: an HTTP answer fails, a line skips
                deep = exc.details.get("reason") == "nested_too_deep"
                if deep:  # unreadable, but an answer's envelope fails its request at once (never its whole timeout)
                    self._unreadable(line.decode("utf-8", "replace"), None, too_deep_words(), "nested_too_deep")
                self._skip(skipped, line, f" [{too_deep_words()}]" if deep else "")
                return
            for incoming in messages:
                self.responses += 1
                if self.log.verbose:
                    label = incoming.method if incoming.kind in ("request", "notification") else incoming.kind
                    rpc = f"{label}" + (f" id={incoming.id}" if incoming.id is not None else "")
                    ms = (time.monotonic() - self._sent_at) * 1000
                    self.log.debug(f"<- stdio [{rpc}] ({ms:.0f} ms)")
                self._deliver(incoming, None)

        too_long = f"longer than {STDIO_LINE_LIMIT} bytes"
        heads: list[bytes] = []

        def on_too_long(head: bytes) -> None:
            heads[:] = [head]
            self._skip(skipped, head, f" [dropped: a line {too_long}]")

        def on_too_long_end(tail: bytes) -> None:
            head = heads.pop().decode("utf-8", "replace") if heads else ""
            self._unreadable(head, tail.decode("utf-8", "replace"), too_long, "line_too_long")

        try:
            read_lines(proc.stdout, on_line, on_too_long, limit=STDIO_LINE_LIMIT, on_too_long_end=on_too_long_end)
        except (OSError, ValueError):
            pass
        self._end(proc)

    def _unreadable(self, head: str, tail: str | None, why: str, reason: str) -> None:
        """A stdout line that cannot be parsed (``head``: all of it, or a too-long line's first bytes and ``tail``
        its last): when it is a JSON-RPC answer with an id (its top level, read without parsing the rest), the
        request of that id fails at once; any other line stays skipped."""
        shaped, request_id = parse_rpc_envelope(head)
        if request_id is None and shaped and tail is not None:
            request_id = parse_trailing_id(tail)
        if shaped and request_id is not None:
            self._lost(Unreadable(request_id, why, reason))

    def _skip(self, skipped: LineTail, line: bytes, note: str) -> None:
        """A stdout line that is not JSON-RPC: counted, kept (scrubbed, clipped) for errors, shown with ``-v``."""
        text = self.log.redactor.scrub(line[: STDIO_LINE_CLIP * 8].decode("utf-8", "replace").strip())
        shown = clip_text(text, STDIO_LINE_CLIP) + note  # scrubbed, then clipped: a secret cut in two would stay
        skipped.add(shown)
        self.log.debug(f"[server stdout, not JSON-RPC] {shown}")

    def _watch_exit(self, proc: Any) -> None:
        """The child is gone but a grandchild may hold stdout open: give the reader a moment only."""
        try:
            proc.wait()
        except Exception:  # pragma: no cover - wait() on a reaped child
            pass
        reader = self._reader
        if reader is not None:
            reader.join(0.5)
        self._end(proc)

    def _end(self, proc: Any) -> None:
        if proc is not self.child.proc or self._ended:
            return
        self.child.exit_status(0.5)  # kept as child.returncode
        self._ended = True
        self._lost()

    def _with_stderr(self, error: BkmcpError, **changes: Any) -> BkmcpError:
        """A copy of ``error`` with the child's recent stderr and its skipped stdout lines (and how many) in its
        details (and ``changes``); never the output of a child shared by several users (``child_output_in_errors``)."""
        if not self.child.server.child_output_in_errors:
            return error.copy(**changes)
        details = dict(error.details)
        tail = self.stderr_tail()
        if tail and "server_stderr" not in details:
            details["server_stderr"] = tail
        lines, count = self._skipped.tail()
        if count and "server_stdout" not in details:
            details.update(server_stdout=lines, server_stdout_skipped=count)
        if details != error.details:
            changes["details"] = details
        return error.copy(**changes)

    def failure(self, method: str, *, sent: bool) -> BkmcpError:
        """The error a request ends with when the child's stream ended (exit, closed stdout)."""
        answer = f" before answering {method}"
        if self._closing:  # bkmcp itself ended it (shutdown, disconnect): not the server's doing
            return ConnectionFailedError(f"bkmcp closed the stdio server{answer}", request_sent=sent)
        status = self.child.returncode if self._ended else self.child.exit_status(0.5)
        exited = ConnectionFailedError(
            f"the stdio server {self.child.describe_exit(status)}{answer}",
            hint=f'check "command", "args" and "env" of {self.child.where()}',
            details={"exit_status": status} if status is not None else {},  # None: it still ran
            remedy="stdio_exit",
        )
        return self._with_stderr(exited, request_sent=sent)

    def timeout_error(self, method: str, deadline: Deadline) -> BkmcpError:
        self._spent = True
        error = budget_error(f"no answer to {method} from the stdio server", deadline.seconds, remedy="timeout_stdio")
        return self._with_stderr(error, request_sent=True)

    # -- writing ---------------------------------------------------------------------------------------

    def send(self, outgoing: Outgoing) -> None:
        """One line on the child's stdin. Headers (``Mcp-Param-*``) do not exist on stdio: everything the server
        needs is in the message and its ``_meta``; so is the session, which is the process."""
        message, deadline = outgoing.message, outgoing.deadline
        method = str(message.get("method", "a response"))
        try:
            try:
                deadline.remaining()
            except McpTimeoutError as exc:
                raise exc.copy(request_sent=False) from None
            self._start()
            if not self.alive:
                raise self.failure(method, sent=False)
            if self.log.verbose:
                rpc = f"{message.get('method', 'response')}" + (f" id={message['id']}" if "id" in message else "")
                self.log.debug(f"-> stdio [{rpc}]")
            self._sent_at = time.monotonic()
            self._write(message, deadline, method)
            if self._probe_next:
                self._probe_next = False
                self.child.open_probe()
        except BkmcpError as exc:
            if outgoing.strict:
                raise
            self.log.debug(f"sending {method} failed: {exc.message}")

    def _write(self, message: Mapping[str, Any], deadline: Deadline, method: str) -> None:
        import select

        text = dump_json(message)
        if "\n" in text or "\r" in text:  # pragma: no cover - dump_json escapes control characters
            raise InternalError("a JSON-RPC message would contain a raw line break")
        data = memoryview((text + "\n").encode("utf-8"))
        proc = self.child.proc
        fd = proc.stdin.fileno()
        if not self._write_lock.acquire(timeout=max(deadline.remaining(), 0.001)):
            raise self.timeout_error(method, deadline).copy(request_sent=False)
        try:
            while data:
                try:
                    data = data[os.write(fd, data) :]
                    continue
                except BlockingIOError:
                    pass
                except OSError as exc:
                    raise self.failure(method, sent=False) from exc
                try:
                    left = deadline.remaining()
                except McpTimeoutError as exc:
                    raise self._with_stderr(exc, request_sent=True) from None  # partly written: never resend
                select.select([], [fd], [], min(left, STDIO_POLL))
        finally:
            self._write_lock.release()

    # -- lifecycle -------------------------------------------------------------------------------------

    def restart_if_exited(self) -> bool:
        """Before the legacy fallback (docs/contract.md §5): a child that exited during the probe is reaped and the next
        message spawns a fresh one. True when it was restarted."""
        if self.child.proc is None or self.alive:
            return False
        self._stop_child()
        self.log.debug("the stdio server exited during the era probe; starting it again for initialize")
        return True

    def close(self, deadline: Deadline | None = None) -> None:
        """Stop the child for good; a start still in progress finishes first, then its child is stopped too."""
        with self._start_lock:
            self._closing = True
        self._stop_child(deadline)

    def _stop_child(self, deadline: Deadline | None = None) -> None:
        spent = self._spent or (deadline is not None and deadline.end <= time.monotonic())
        busy = self._write_lock.locked()
        self.child.stop(quick=spent, stdin_busy=busy, readers=[self._reader] if self._reader else [])


def open_transport(server: ResolvedServer, *, insecure: bool, log: Log, **options: Any) -> Transport:
    """The transport for ``server.type`` (a registry: one class + one entry per transport; section 3 admits
    only these types)."""
    return TRANSPORTS[server.type](server, insecure=insecure, log=log, **options)  # type: ignore[no-any-return]


TRANSPORTS: dict[str, Callable[..., Any]] = {"http": HttpTransport, "stdio": StdioTransport}


# ======================================================================================================
# 7. Client flows — deferred in the pyz
# ======================================================================================================

# ``McpSession`` drives the section-5 core over a section-6 transport: open once, then any number of requests,
# many in flight at once (from as many threads), each with its own deadline. The flows below —
# negotiate, discover, call, check, dry-run — take a session (or open one) and a per-operation ``OpContext``;
# the CLI (section 11) and the resident mode (section 10) only parse their input, call them and render.


# -- 7.1 the operation context (OpContext) and McpSession, many requests in flight -------------------------------------


@dataclass
class OpContext:
    """What one operation carries through the flows of section 7 instead of module or process state: its time
    budget and who logs for it. ``progress`` (a factory of ``ProgressLine`` for a token) asks servers for progress
    on calls (docs/contract.md §5); ``renewed`` records that a lost legacy session was re-initialized (once per
    operation)."""

    deadline: Deadline
    log: Log
    progress: Callable[[str], ProgressLine] | None = None  # token -> the line that shows that call's progress
    renewed: bool = False
    # the user asked for the catalogue itself (--tools, --check, --resources, --prompts): a kept one is listed again
    refresh: bool = False
    # what a Ctrl-C has to report (docs/contract.md §7): the last request whose sending began, and whether a
    # tools/call was among them (once handed to the transport it may have reached the server)
    last_request: str | None = None
    call_sent: bool = False
    # where the CLI's operations get their session: a new one each (``FreshSessions``), unless a warm front end
    # (``--keep-alive``, docs/contract.md §14) lends one it keeps
    sessions: SessionSource | None = None
    on_request: Callable[[str], None] | None = None  # hears each request as it is sent (a warm client must know)
    # a kept stdio session's stderr position when the operation began (``ChildProcess.stderr_tail``): its errors
    # tell the start-up lines and its own, not those of earlier operations; None: every line is this operation's
    stderr_since: int | None = None
    stdout_since: int | None = None  # the same for its skipped stdout lines (``StdioTransport.stdout_skipped``)
    task: dict[str, Any] | None = None  # the handle of the task this operation waits for (a Ctrl-C reports it)
    # who answers the server's questions (elicitation) for this operation; None: nobody (the resident), and a
    # legacy question is declined with -32601 as a request for an undeclared capability
    input: InputSource | None = None
    # what this operation's modern requests declare in their _meta instead of the session's client_capabilities
    # (a resident skill command on a kept 2026-07-28 session: the skills extension, on its own requests only)
    declares: Mapping[str, Any] | None = None

    def note_request(self, method: str) -> None:
        """``method`` is being handed to the transport (``McpSession.request``)."""
        self.last_request = method
        self.call_sent = self.call_sent or method == "tools/call"
        if self.on_request is not None:
            self.on_request(method)


CANCEL_BUDGET = 1.0
_KEPT_NOTIFICATIONS = 1000  # a chatty server cannot grow memory without bound
STDIO_PROBE_WINDOW = 2.0  # shared stream: no answer to server/discover within this (inside the budget) means legacy
STDIO_PROBE_POLL = 0.025  # how often the window asks whether the server has read the probe yet
DECLINED_CAPABILITIES = {
    "sampling/createMessage": "sampling",
    "roots/list": "roots",
    "elicitation/create": "elicitation",
}


@dataclass(frozen=True)
class InputAnswer:
    """How one server question is answered (docs/contract.md §5): ``result`` is the ``ElicitResult`` to send, None
    when no answer is at hand; ``problems`` say why answers given do not fit the question (then ``result`` is None
    and the question counts as unanswered); ``unsupported`` names a request kind bkmcp never answers (sampling,
    roots)."""

    result: dict[str, Any] | None
    problems: tuple[dict[str, str], ...] = ()
    unsupported: str | None = None


class InputSource:
    """Who answers a server's questions for one operation (docs/contract.md §5). This base has no answers at all
    (headless, nothing given): every question is unanswered, nothing is declared and nothing is kept for a resume.
    The CLI's (section 8, ``CommandLineInput``) types answers given on the command line or asks on a terminal."""

    capabilities: dict[str, Any] = {}  # what the session declares: only what this source can answer
    resuming = False  # it answers a round an earlier process kept: request ids start at random (``ids_from``)

    def answer(self, key: str | None, request: Mapping[str, Any], several: bool) -> InputAnswer:
        """The answer to one question (``request``: ``{"method", "params"}``); ``key`` is its ``inputRequests`` key
        (None for a legacy mid-call request), ``several``: its round asks more than one."""
        method = request.get("method")
        return InputAnswer(None, unsupported=None if method == "elicitation/create" else str(method))

    def park(self, method: str, params: Mapping[str, Any], pending: InputRound, era: str | None) -> dict[str, Any]:
        """A round no answer was at hand for, kept so that a later command can answer it: what ``data`` says about
        it (``resume``, ``expires_in_s``); the base keeps nothing."""
        return {}

    def hold(self, request: Mapping[str, Any], reply: Callable[[dict[str, Any]], None]) -> bool:
        """A legacy question answered later, by whoever calls ``reply(ElicitResult)`` (the resident's platform):
        True when this source took it (nothing is sent now); the base answers at once (``answer``)."""
        return False


class RequestHandle:
    """What the caller learns about one request while it runs: its id, whether it was sent, the server requests
    that were declined on its behalf, and the questions (legacy ``elicitation/create``) asked during it with how
    each was answered (``asked``: ``{"request", "answer", "problems"}``)."""

    __slots__ = ("id", "method", "sent", "declined", "asked", "input", "_event", "message", "error", "log")

    def __init__(self) -> None:
        import threading

        self.id: Any = None
        self.method = "the request"
        self.sent = False
        self.declined: list[str] = []
        self.asked: list[dict[str, Any]] = []
        self.input: InputSource | None = None  # its operation's (``OpContext.input``)
        self._event = threading.Event()
        self.message: Message | None = None
        self.error: BkmcpError | None = None
        self.log: Log | None = None  # its operation's (a warning on its behalf goes there, not to the session's)

    def _finish(self, message: Message | None = None, error: BkmcpError | None = None) -> None:
        self.message, self.error = message, error
        self._event.set()


class McpSession:
    """One live MCP session: the sans-IO ``ClientSession`` driven over one ``Transport``.

    ``request()`` may be called from many threads at once; the core is only touched under ``_lock``. A request
    registers its handle before it is sent, so its answer can never arrive unclaimed. When a shared stream dies
    (a stdio child exits), every request in flight on it fails with ``outcome: unknown`` (it was sent).
    ``close()`` is explicit and idempotent. ``on_notification`` (if set) sees every server notification.
    """

    def __init__(
        self,
        server: ResolvedServer,
        *,
        insecure: bool,
        log: Log,
        transport: Transport | None = None,
        **transport_options: Any,
    ) -> None:
        import collections

        self.server = server
        self.log = log
        self.transport: Transport = (
            transport
            if transport is not None
            else open_transport(server, insecure=insecure, log=log, **transport_options)
        )
        # one shared stream (stdio): nothing but the id ties an answer to its request, so the ids are not guessable
        self.core = ClientSession(random_first_id() if self.transport.shared_stream else 1)
        self.notifications: collections.deque[dict[str, Any]] = collections.deque(maxlen=_KEPT_NOTIFICATIONS)
        self.on_notification: Callable[[Message], None] | None = None
        self.on_stray: Callable[[Stray], None] | None = None  # the resident's events; the CLI's log warns either way
        self.on_fell_back: Callable[[], None] | None = None  # the resident's event: the era turned legacy
        self.closed = False
        # a legacy HTTP session holding a task still alive is left open at the end (no DELETE): the task lives in it
        self.keep_session = False
        self._lock = _thread.allocate_lock()
        self._renew_lock = _thread.allocate_lock()
        self._handles: dict[tuple[type, Any], RequestHandle] = {}
        self._progress: dict[Any, Callable[[dict[str, Any]], bool]] = {}
        self.transport.attach(self._deliver, self._lost, self._answer_headers)

    # -- state -----------------------------------------------------------------------------------------

    @property
    def era(self) -> str | None:
        return self.core.era

    @property
    def protocol_version(self) -> str | None:
        return self.core.protocol_version

    @property
    def rules(self) -> EraRules | None:
        return self.core.rules

    @property
    def responses(self) -> int:
        """HTTP answers (or stdio messages) received so far: evidence that the connection stage passed."""
        return self.transport.responses

    @property
    def in_flight(self) -> int:
        with self._lock:
            return len(self._handles)

    # -- requests --------------------------------------------------------------------------------------

    def request(
        self,
        method: str,
        params: dict[str, Any] | None,
        ctx: OpContext,
        *,
        rules: EraRules | None = None,
        handshake: bool = False,
        extra_headers: Iterable[tuple[str, str]] = (),
        deadline: Deadline | None = None,
        handle: RequestHandle | None = None,
    ) -> Message:
        """Send one request and wait for its answer (a result or error ``Message``). ``rules`` defaults to the
        negotiated ones; ``handshake`` sends without the version header (legacy ``initialize``); ``deadline``
        narrows the operation's budget (the probe window). Never resends."""
        if self.closed:
            raise ConnectionFailedError("the session is closed", request_sent=False)
        rules = rules or self.core.rules
        assert rules is not None
        deadline = deadline or ctx.deadline
        handle = handle or RequestHandle()
        with self._lock:
            message = self.core.start_request(
                method, params, rules, ctx.input.capabilities if ctx.input is not None else ctx.declares
            )
            handle.id, handle.method, handle.log, handle.input = message["id"], method, ctx.log, ctx.input
            self._handles[id_key(handle.id)] = handle
        ctx.note_request(method)
        interrupt = ctx.deadline.interrupt  # a warm client's Ctrl-C: wakes the wait, raised as KeyboardInterrupt
        hook = interrupt.hook(handle._event.set) if interrupt is not None else None
        try:
            self.transport.send(
                Outgoing(
                    message, None if handshake else rules, deadline, self.core.session_id, extra_headers=extra_headers
                )
            )
            handle.sent = True
            if not deadline.wait(handle._event):  # woken by its answer
                raise self.transport.timeout_error(method, deadline)
            if interrupt is not None:
                interrupt.check()
        except BkmcpError as exc:
            if interrupt is not None:
                interrupt.check()  # a read cut short by the interrupt is the interrupt
            own = self._own_output(exc, ctx)
            if own is exc:
                raise
            raise own  # noqa: B904 - the same error with its operation's output: its chain stays
        finally:
            if hook is not None and interrupt is not None:
                interrupt.unhook(hook)
            with self._lock:
                if self._handles.pop(id_key(handle.id), None) is not None:
                    self.core.forget(handle.id)
        if handle.error is not None:
            raise self._own_output(handle.error, ctx)
        assert handle.message is not None
        return handle.message

    def _own_output(self, error: BkmcpError, ctx: OpContext) -> BkmcpError:
        """``error`` with the server output this operation would have been told by a server started for it alone: on
        a kept session (``ctx.stderr_since``, ``ctx.stdout_since``) the start-up lines and its own stderr and
        skipped stdout lines, not earlier operations' (§14). As the transport does: no lines, no keys."""
        details = dict(error.details)
        stdio = self.transport.stdio
        if stdio is not None and ctx.stderr_since is not None and "server_stderr" in details:
            details["server_stderr"] = stdio.stderr_tail(ctx.stderr_since)
            if not details["server_stderr"]:
                del details["server_stderr"]
        if stdio is not None and ctx.stdout_since is not None and "server_stdout_skipped" in details:
            lines, count = stdio.stdout_skipped(ctx.stdout_since)
            details.update(server_stdout=lines, server_stdout_skipped=count)
            if not count:
                del details["server_stdout"], details["server_stdout_skipped"]
        return error if details == error.details else error.copy(details=details)

    def mark_started(self) -> None:
        """Negotiated: what its server process wrote to stderr (and skipped stdout) so far is its start-up
        (``OpContext.stderr_since``, ``stdout_since``)."""
        if self.transport.stdio is not None:
            self.transport.stdio.mark_started()

    def notify(self, method: str, params: dict[str, Any] | None, deadline: Deadline, *, strict: bool = True) -> None:
        self.transport.send(
            Outgoing(
                self.core.notification(method, params), self.core.rules, deadline, self.core.session_id, strict=strict
            )
        )

    def watch_progress(self, token: Any, callback: Callable[[dict[str, Any]], bool] | None) -> None:
        with self._lock:
            if callback is None:
                self._progress.pop(token, None)
            else:
                self._progress[token] = callback

    # -- what arrives ----------------------------------------------------------------------------------

    def _deliver(self, message: Message, related: Any) -> bool:
        """The transport's callback for every incoming message; True once ``related`` has been answered."""
        declined_logs: dict[int, list[Log]] = {}  # Declined event -> the logs of the operations it was for
        asked: list[tuple[Asked, RequestHandle | None]] = []
        with self._lock:
            events = self.core.receive(message, related=related)
            answered = related is not None and id_key(related) not in self._handles
            for event in events:
                if isinstance(event, Answered):
                    handle = self._handles.pop(id_key(event.request_id), None)
                    if handle is not None:
                        handle._finish(event.message)
                    answered = answered or (related is not None and same_id(event.request_id, related))
                elif isinstance(event, Declined):
                    targets = (
                        [self._handles[id_key(related)]]
                        if related is not None and id_key(related) in self._handles
                        else list(self._handles.values())
                    )
                    for handle in targets:
                        handle.declined.append(event.method)
                    logs = {id(h.log): h.log for h in targets if h.log is not None}
                    declined_logs[id(event)] = list(logs.values()) or [self.log]
                elif isinstance(event, Asked):  # the request it came with, else the one in flight that can answer
                    candidates = (
                        [self._handles[id_key(related)]]
                        if related is not None and id_key(related) in self._handles
                        else [h for h in self._handles.values() if h.input is not None]
                    )
                    asked.append((event, candidates[0] if candidates else None))
        for event, handle in asked:
            self._answer_question(event.message, handle)
        for event in events:
            if isinstance(event, Notified):
                self._on_notification(event.message)
            elif isinstance(event, Reply):
                self.transport.send(
                    Outgoing(
                        event.message, self.core.rules, Deadline(CANCEL_BUDGET), self.core.session_id, strict=False
                    )
                )
            elif isinstance(event, Declined):
                for log in declined_logs.get(id(event), [self.log]):
                    log.warn(
                        f"the server sent a {event.method!r} request; bkmcp declares no client capabilities "
                        "and declined it (-32601)"
                    )
            elif isinstance(event, Stray):
                self._on_stray(event)
        return answered

    def _answer_question(self, message: Message, handle: RequestHandle | None) -> None:
        """A legacy ``elicitation/create``: answered from the operation's ``InputSource`` (docs/contract.md §5); no
        answer at hand (or answers that do not fit) is ``cancel``, never ``decline``; an operation with no source
        (the resident) declines it with -32601 as before. What was asked and answered goes on the handle."""
        request = {"method": "elicitation/create", "params": message.params if isinstance(message.params, dict) else {}}
        if handle is None or handle.input is None:
            reply = build_response(message.id, error={"code": -32601, "message": "Method not found"})
            if handle is not None:
                handle.declined.append("elicitation/create")
            (handle.log if handle is not None and handle.log is not None else self.log).warn(
                "the server sent an 'elicitation/create' request; nothing can answer it here and it was declined "
                "(-32601)"
            )
        elif handle.input.hold(request, lambda result: self._reply_later(message.id, result)):
            return
        else:
            try:
                answer = handle.input.answer(None, request, False)
            except BkmcpError as exc:  # e.g. the terminal went away: the question stays unanswered
                answer = InputAnswer(None, ({"message": exc.message},))
            result = answer.result if answer.result is not None else {"action": "cancel"}
            handle.asked.append(
                {
                    "request": request,
                    "answer": result,
                    "problems": list(answer.problems),
                    "given": answer.result is not None,
                }
            )
            reply = build_response(message.id, result=result)
        self.transport.send(
            Outgoing(reply, self.core.rules, Deadline(CANCEL_BUDGET), self.core.session_id, strict=False)
        )

    def _reply_later(self, request_id: Any, result: dict[str, Any]) -> None:
        """The answer to a question held open (``InputSource.hold``); a session closed meanwhile drops it."""
        rules = self.core.rules
        if self.closed or rules is None:
            return
        try:
            reply = build_response(request_id, result=result)
            self.transport.send(Outgoing(reply, rules, Deadline(CANCEL_BUDGET), self.core.session_id, strict=False))
        except BkmcpError as exc:
            self.log.debug(f"a held question's answer could not be sent: {exc.code}")

    def _on_stray(self, stray: Stray) -> None:
        """A response that answers nothing in flight: reported (a warning; the resident's event too), never
        delivered. A late answer (its request timed out or was cancelled) is expected and only shown with -v."""
        if self.on_stray is not None:
            self.on_stray(stray)
        shown = clip_text(repr(stray.message.id), 40)
        if stray.why == "late":
            self.log.debug(f"ignoring a late answer to request id {shown} (that request already ended)")
            return
        said = {
            "duplicate": f"answered request id {shown} a second time",
            "unknown": f"sent an answer to request id {shown}, which bkmcp never sent",
            "null_id": "sent an error with a null id, which answers no request",
        }[stray.why]
        error = stray.message.error if stray.message.kind == "error" else None
        code = f" (JSON-RPC error {error.get('code')})" if error is not None else ""
        self.log.warn(f"the server {said}{code}; it was ignored (a protocol violation, or a line of its output)")

    def _answer_headers(self, method: str, headers: Mapping[str, str]) -> None:
        """The transport's callback with the HTTP headers of each answer to a request: the core decides."""
        with self._lock:
            self.core.session_issued(method, headers)

    def _on_notification(self, note: Message) -> None:
        self.notifications.append({"method": note.method, "params": note.params})
        params = note.params if isinstance(note.params, dict) else {}
        if note.method == "notifications/progress":
            with self._lock:
                callback = self._progress.get(params.get("progressToken"))
            if callback is None or not callback(params):
                self.log.debug(f"ignored notifications/progress not for this call: {clip_text(dump_json(params), 200)}")
        elif note.method == "notifications/message":
            level = clip_text(str(params.get("level")), 20)
            self.log.debug(f"server log [{level}]: {clip_text(dump_json(params.get('data')), 500)}")
        else:
            self.log.debug(f"notification {note.method}")
        if self.on_notification is not None:
            self.on_notification(note)

    def _lost(self, unreadable: Unreadable | None = None) -> None:
        """The shared stream ended: every request in flight on it fails (they were all sent). ``unreadable``: only
        the request whose answer arrived but could not be read fails, at once, saying why (a protocol error)."""
        with self._lock:
            if unreadable is None:
                handles = list(self._handles.values())
                self._handles.clear()
            else:
                found = self._handles.pop(id_key(unreadable.request_id), None)
                handles = [found] if found is not None else []
            for handle in handles:
                self.core.forget(handle.id)
        for handle in handles:
            if unreadable is None:
                handle._finish(error=self.transport.failure(handle.method, sent=True))
            else:
                error = ProtocolError(
                    f"the server's answer to {handle.method} is {unreadable.why}; bkmcp could not read it",
                    details={"reason": unreadable.reason},
                    request_sent=True,
                )
                handle._finish(error=error)
        if unreadable is not None and not handles:
            self.log.warn(
                f"the server sent an answer to request id {clip_text(repr(unreadable.request_id), 40)}, which is not "
                f"in flight, and it is {unreadable.why}; it was ignored"
            )

    # -- lifecycle -------------------------------------------------------------------------------------

    @property
    def alive(self) -> bool:
        return not self.closed and self.transport.alive

    def renew(self, ctx: OpContext, lost_session_id: str | None) -> None:
        """A legacy server lost the session: initialize again, once for everyone who saw the same session end."""
        assert self.core.rules is not None
        with self._renew_lock:
            if self.core.session_id != lost_session_id:
                return  # another request already renewed it
            self.core.session_ended()
            initialize(self, ctx, self.core.rules.version)

    def fall_back(self, ctx: OpContext) -> None:
        """The tentative modern era was refused as a legacy server would (``ClientSession.refused_as_legacy``):
        ``initialize``, once for everyone who saw the refusal."""
        with self._renew_lock:
            if not self.core.tentative:
                return
            initialize(self, ctx, LATEST_LEGACY_VERSION)
        if self.on_fell_back is not None:
            self.on_fell_back()

    def close(self, deadline: Deadline | None = None) -> None:
        """End the session (DELETE for legacy HTTP sessions) and the transport; idempotent. Requests still in
        flight fail at once (``stop_requests``, before the DELETE, which may take its time), as if the stream had
        ended."""
        if self.closed:
            return
        self.closed = True
        try:
            self.transport.stop_requests()
            rules, session_id = self.core.rules, self.core.session_id
            if rules is not None and rules.sessions and self.transport.has_sessions and session_id:
                if self.keep_session:
                    self.log.debug("the session holds a live task: left open (no DELETE)")
                    return
                try:
                    left = deadline.left() if deadline is not None else 2.0
                    self.transport.end_session(Deadline(max(min(left, 2.0), 0.2)), rules=rules, session_id=session_id)
                except Exception as exc:  # cleanup never replaces the operation's own outcome
                    self.log.debug(f"session cleanup failed: {type(exc).__name__}")
                with self._lock:
                    self.core.session_ended()
        finally:
            self.transport.close(deadline)
            self._lost()


# -- 7.2 negotiation: the era probe over a session, the stdio probe window (docs/contract.md §5) -----------------------


def negotiate(session: McpSession, ctx: OpContext, *, server_info: bool = False) -> None:
    """Run the section-5 ``Negotiation`` over the session: each step's I/O here, each decision there."""
    pinned = session.server.protocol_version
    plan = Negotiation(pinned, server_info=server_info, restartable=session.transport.stdio is not None)
    step = plan.start()
    if pinned is not None:
        ctx.log.debug(f"protocol version pinned to {pinned} ({era_rules(pinned).era}); no era probe")
    for _ in range(8):  # bounded: the plan takes at most six steps
        if step.action == "done":
            assert step.version is not None
            if session.core.rules is None or session.core.rules.version != step.version:
                session.core.apply_discover(None, step.version)
                _log_protocol(session, ctx)
            return
        if step.action == "discover":
            evidence, probed = _discover_step(session, ctx, step), step.probing
            step = plan.after_discover(step, evidence)
            if step.action == "done":
                session.core.apply_discover(evidence.message, step.version or "", tentative=probed)
                _log_protocol(session, ctx)
                return
            if step.action in ("restart", "initialize"):
                ctx.log.debug(
                    f"era probe: no modern answer; falling back to legacy initialize ({LATEST_LEGACY_VERSION})"
                )
            elif step.probing:
                ctx.log.debug(f"era probe: server supports {step.version}; retrying server/discover once with it")
        elif step.action == "restart":
            stdio = session.transport.stdio
            step = plan.after_restart(step, stdio is not None and stdio.restart_if_exited())
        else:
            assert step.version is not None
            try:
                initialize(session, ctx, step.version)
                return
            except (ConnectionFailedError, ProtocolError) as exc:
                step = plan.after_initialize_failed(step, exc)
                if step.action in ("discover", "done"):
                    how = "with -32022" if exc.http_status != 404 else "with HTTP 404, -32601 like server/discover"
                    ctx.log.debug(f"initialize refused {how}: the server serves {step.version}; using the modern era")
    raise AssertionError("negotiation did not settle")  # pragma: no cover - the plan is bounded


class ProbeWindow(Deadline):
    """The stdio probe's window (docs/contract.md §5): ``seconds`` from when the server has READ the probe, not from
    when bkmcp wrote it, so that start-up time (npx, loading modules, imports: spent before a server reads its stdin)
    never counts and the era does not depend on the machine's load. Until then only ``outer`` (the operation's
    budget) bounds the wait; ``unread()`` (the probe's bytes still in the pipe) is asked every ``poll`` seconds.
    When it cannot be told (None), the window starts at once: from the write, as it did before."""

    def __init__(
        self,
        seconds: float,
        outer: Deadline,
        unread: Callable[[], int | None],
        *,
        poll: float = STDIO_PROBE_POLL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(seconds, clock)
        self.outer, self._unread, self._poll = outer, unread, poll
        self.end = outer.end
        self.read_after_ms: int | None = None  # when the window started (ms after the probe was sent); None: not yet
        self.counted = False  # the start is when the server read the probe (False: from the write, or not yet)

    def wait(self, event: Any) -> bool:
        while self.read_after_ms is None:
            unread = self._unread()
            if not unread:  # 0: the server took it; None: cannot be told
                now = self._clock()
                self.read_after_ms, self.counted = int((now - self._start) * 1000), unread is not None
                self.end = min(now + self.seconds, self.outer.end)
                break
            if event.wait(max(min(self._poll, self.left()), 0)):
                return True
            if self._clock() >= self.end:
                return False
        return super().wait(event)


def _log_protocol(session: McpSession, ctx: OpContext) -> None:
    rules = session.core.rules
    assert rules is not None
    ctx.log.debug(f"protocol: {rules.version} ({rules.era} era)")


def _discover_step(session: McpSession, ctx: OpContext, step: Step) -> Evidence:
    """``server/discover`` with the modern headers and ``_meta``. When probing, what comes back is era evidence:
    401/403, redirects, and (over HTTP) timeouts and connection failures are not, so they propagate."""
    assert step.version is not None
    rules = era_rules(step.version)
    probing = step.probing
    if probing:
        ctx.log.debug(f"era probe: server/discover at {rules.version}")
    stdio = session.transport.stdio if probing and session.transport.shared_stream else None
    window = ProbeWindow(STDIO_PROBE_WINDOW, ctx.deadline, stdio.unread_input) if stdio is not None else None
    evidence: Evidence
    answer: Message | None = None
    try:
        if stdio is not None:
            stdio.probe_begins()
        try:
            answer = session.request("server/discover", None, ctx, rules=rules, deadline=window)
        finally:
            if stdio is not None and window is not None:
                stdio.probe_ends(rejected=answer is not None and answer.kind == "error")
                _log_window(window, ctx, answered=answer is not None)
        if not probing and answer.kind == "error":
            raise rpc_error_exception("server/discover", answer.error or {})
        evidence = Evidence(200, answer)
    except RemoteError as exc:
        status = exc.http_status
        if status is not None:
            message = exc.http_message
            if not probing and not (
                status == 404
                and message is not None
                and message.kind == "error"
                and (message.error or {}).get("code") == -32601
            ):
                raise
            evidence = Evidence(status, message)
        elif isinstance(exc, ProtocolError):
            if not probing or stdio is not None:  # stdio skips lines that are not JSON-RPC (§9): no era evidence here
                raise
            evidence = Evidence(200, None)  # an unparsable answer from a non-MCP or legacy endpoint
        elif isinstance(exc, (McpTimeoutError, ConnectionFailedError)) and stdio is not None:
            # No answer within the probe window, or the child exited (the Rust SDK stops on any request before
            # initialize) -> legacy (docs/contract.md §5). The operation's own budget still rules: spent on the
            # probe (a server that never read it), the error is the transport's, with what the server printed.
            try:
                ctx.deadline.remaining()
            except McpTimeoutError:
                if not isinstance(exc, McpTimeoutError):
                    raise
                raise session.transport.timeout_error("server/discover", ctx.deadline) from None
            ctx.log.debug(
                "era probe: "
                + ("no answer within the probe window" if isinstance(exc, McpTimeoutError) else "the server exited")
            )
            evidence = Evidence(silent=True, message=None)
        else:
            raise
    if probing:
        verdict, value = classify_discover(evidence.status, evidence.message, rules.version)
        ctx.log.debug(f"era probe verdict: {verdict}" + (f" {value}" if value else ""))
    return evidence


def _log_window(window: ProbeWindow, ctx: OpContext, *, answered: bool) -> None:
    seconds = format_duration(window.seconds)
    if window.read_after_ms is None:  # answered between two looks at the pipe, or never read
        done = f"read and answered the probe after {window.elapsed_ms()} ms" if answered else "had not read the probe"
        ctx.log.debug(f"era probe: the server {done}")
    elif window.counted:
        ctx.log.debug(
            f"era probe: the server read the probe after {window.read_after_ms} ms; the {seconds} window began"
        )
    else:
        ctx.log.debug(f"era probe: when the server reads its stdin cannot be told here; the {seconds} window began")


def initialize(session: McpSession, ctx: OpContext, offer: str) -> None:
    """The legacy handshake: ``initialize`` (no version header yet), then ``notifications/initialized``."""
    session.core.handshake_started()
    params = build_initialize_params(offer, session.core.client_capabilities)
    answer = session.request("initialize", params, ctx, rules=era_rules(offer), handshake=True)
    rules = session.core.apply_initialize(answer, offer)
    if rules.version != offer:
        ctx.log.debug(f"the server chose {rules.version} (offered {offer})")
    _log_protocol(session, ctx)
    session.notify("notifications/initialized", None, ctx.deadline)
    if "elicitation" in session.core.client_capabilities:  # a question may come outside any request's stream
        session.transport.listen(rules, session.core.session_id, ctx.deadline)


def open_session(
    server: ResolvedServer, ctx: OpContext, *, insecure: bool, server_info: bool = False, **transport_options: Any
) -> McpSession:
    """A negotiated session (closed again if negotiation fails)."""
    session = McpSession(server, insecure=insecure, log=ctx.log, **transport_options)
    try:
        negotiate(session, ctx, server_info=server_info)
    except BaseException:
        session.close(ctx.deadline)
        raise
    return session


class SessionSource:
    """Where ``run_tools`` and ``run_call`` get their session, in three steps: ``start`` (a session, maybe not
    negotiated yet), ``ready`` (negotiated; its failures are the operation's), ``done`` (the operation ended, however).
    This one is the CLI's default: a new session each time, closed at the end. The warm front end's
    (``WarmSessions``, section 10.5) lends a kept one and keeps it."""

    def start(self, server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> McpSession:
        session = McpSession(server, insecure=insecure, log=ctx.log)
        if ctx.input is not None:  # a legacy server learns it at initialize (docs/contract.md §5)
            session.core.client_capabilities = dict(ctx.input.capabilities)
            if ctx.input.resuming and not session.transport.shared_stream:  # stdio ids are random already
                session.core.ids_from(random_first_id())
        return session

    def ready(self, session: McpSession, ctx: OpContext) -> None:
        negotiate(session, ctx)

    def discover(self, session: McpSession, ctx: OpContext) -> tuple[list[dict[str, Any]], int]:
        """The catalogue (``discover_tools``); a source that keeps sessions may answer from what it kept."""
        return discover_tools(session, ctx)

    def listing(self, session: McpSession, ctx: OpContext, listing: Listing) -> list[dict[str, Any]]:
        """The items of ``listing`` (``discover_listing``); a source that keeps sessions may answer from what it
        kept (resources, templates, prompts as tools: ``discover``)."""
        return discover_listing(session, ctx, listing)[0]

    def done(self, session: McpSession, ctx: OpContext) -> None:
        session.close(ctx.deadline)


# -- 7.3 requests after negotiation: discover, catalogue freshness, call, cancel ---------------------------------------

# The stage an operation is in, named by its last request sent (a Ctrl-C reports it: docs/contract.md §7).
_REQUEST_STAGES = {
    "server/discover": "negotiate",
    "initialize": "negotiate",
    "tools/list": "discover",
    "resources/list": "discover",
    "resources/templates/list": "discover",
    "prompts/list": "discover",
    "skills/list": "discover",
    "tools/call": "call",
}


def stage_of(method: str) -> str:
    return _REQUEST_STAGES.get(method, method)


def request_result(
    session: McpSession,
    ctx: OpContext,
    method: str,
    params: dict[str, Any] | None,
    pending: InputRound | None = None,
    *,
    cancel: bool = False,
) -> dict[str, Any]:
    """A non-call request; a lost legacy session is re-initialized once per operation, and a tentative modern era
    refused as by a legacy server falls back to ``initialize`` once (docs/contract.md §5). ``cancel``: a request
    that was sent and timed out is cancelled on the wire as a timed-out ``tools/call`` is (``_cancel``):
    ``resources/read`` and ``prompts/get``, whose work a server may go on doing. A server's questions
    (``prompts/get``, ``resources/read``) go through ``send_with_input``, as a call's do; ``pending``: a round
    kept by an earlier command (``--resume``), answered before anything else is sent."""
    handles: list[RequestHandle] = []

    def send(current: dict[str, Any] | None) -> Message:
        return _request_once(session, ctx, method, current, handles, cancel=cancel)

    if ctx.input is not None and method in INPUT_METHODS:
        answer = send_with_input(session, ctx, method, params or {}, send, pending)
    else:
        answer = send(params)
    result = check_result(method, answer)
    raise_unanswered(method, handles, {"result": result})
    return result


def _request_once(
    session: McpSession,
    ctx: OpContext,
    method: str,
    params: dict[str, Any] | None,
    handles: list[RequestHandle],
    *,
    cancel: bool,
) -> Message:
    """One request of ``request_result`` (each attempt's handle joins ``handles``: the questions asked on it)."""
    for attempt in range(2):
        rules = session.core.rules
        assert rules is not None
        session_id = session.core.session_id
        handle = RequestHandle()
        handles.append(handle)
        try:
            return session.request(method, params, ctx, handle=handle)
        except RemoteError as exc:
            if cancel and isinstance(exc, McpTimeoutError) and request_was_sent(exc):
                _cancel(session, rules, handle.id, reason=f"timed out after {format_duration(ctx.deadline.seconds)}")
            if attempt == 0 and session.core.refused_as_legacy(exc):  # never asked for tools/call (call_tool)
                ctx.log.debug(f"{method} refused as by a legacy server ({exc.message}); falling back to initialize")
                session.fall_back(ctx)
                continue
            if exc.session_lost and attempt == 0 and rules.handshake and not ctx.renewed:
                ctx.renewed = True  # once per operation: a server that keeps losing it is an error
                ctx.log.debug(f"the server lost the session (HTTP {exc.http_status}); re-initializing once")
                session.renew(ctx, session_id)
                continue
            raise
    raise AssertionError("unreachable")  # pragma: no cover


INPUT_METHODS = ("tools/call", "prompts/get", "resources/read")  # the requests a server may answer input_required
MAX_INPUT_ROUNDS = 10  # input_required rounds one request may take (docs/contract.md §5); then it stops, said so


def send_with_input(
    session: McpSession,
    ctx: OpContext,
    method: str,
    params: dict[str, Any],
    send: Callable[[dict[str, Any]], Message],
    pending: InputRound | None = None,
) -> Message:
    """The one multi-round-trip loop (2026-07-28, SEP-2322) of ``tools/call``, ``prompts/get`` and
    ``resources/read``: while the answer is ``input_required``, each question is answered by ``ctx.input`` and the
    same method and params are sent again (``send``: a new request, so a new JSON-RPC id) with ``inputResponses``
    and the ``requestState`` echoed exactly (none when the server sent none). At most ``MAX_INPUT_ROUNDS`` rounds.
    A question no answer is at hand for ends it: ``input_required`` with the questions, and the round kept for a
    later ``--resume`` (``InputSource.park``). The final answer is returned as received (the caller checks it)."""
    assert ctx.input is not None
    rounds = 0
    message = send(params) if pending is None else None
    while True:
        if message is not None:
            result = message.result if message.kind == "result" else None
            if not isinstance(result, dict) or result.get("resultType") != "input_required":
                return message
            pending = parse_input_round(method, result)
        assert pending is not None
        rounds += 1
        if rounds > MAX_INPUT_ROUNDS:
            raise ProtocolError(
                f"{method}: the server asked for input {MAX_INPUT_ROUNDS} times and still asks; bkmcp stopped "
                "(at most {MAX_INPUT_ROUNDS} rounds)".replace("{MAX_INPUT_ROUNDS}", str(MAX_INPUT_ROUNDS)),
                hint="the server keeps asking; check the answers given, or report it to the server's authors",
                details={"rounds": MAX_INPUT_ROUNDS, "outcome": "not_completed"},
            )
        if session.era != "modern":
            raise ProtocolError(
                f"{method}: an input_required round can only be answered on a 2026-07-28 session; the server now "
                f"speaks {session.protocol_version}",
                details={"outcome": "not_sent"},
            )
        responses, unanswered = answer_round(ctx.input, method, pending)
        if unanswered:
            parked = ctx.input.park(method, params, pending, session.era)
            raise build_input_required(method, unanswered, parked)
        retry = {key: value for key, value in params.items() if key not in ("inputResponses", "requestState")}
        if pending.requests:
            retry["inputResponses"] = responses
        if pending.state is not None:
            retry["requestState"] = pending.state  # the exact string received: never parsed, never rebuilt
        ctx.log.debug(f"{method}: answering input round {rounds} ({', '.join(map(repr, responses)) or 'state only'})")
        message = send(retry)


def answer_round(
    source: InputSource, method: str, pending: InputRound
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(``inputResponses`` by key, the questions left unanswered by key, each described for ``data``). A request
    for sampling or roots is ``mcp_capability_unsupported``: bkmcp never makes up such an answer."""
    responses: dict[str, Any] = {}
    unanswered: dict[str, dict[str, Any]] = {}
    several = len(pending.requests) > 1
    for key, request in pending.requests.items():
        answer = source.answer(key, request, several)
        if answer.unsupported is not None:
            raise CapabilityUnsupportedError(
                f"{method}: the server asks for {clip_text(answer.unsupported, 60)} ({clip_text(repr(key), 60)}), "
                "which bkmcp does not provide; nothing was made up",
                hint="bkmcp answers elicitation only; it never answers sampling or roots requests",
                details={"capability": answer.unsupported, "input_request": key, "outcome": "not_completed"},
            )
        if answer.result is None:
            unanswered[key] = describe_question(request, answer.problems)
        else:
            responses[key] = answer.result
    return responses, unanswered


def describe_question(request: Mapping[str, Any], problems: Sequence[Mapping[str, str]] = ()) -> dict[str, Any]:
    """One server question for ``data.input_requests``: method, mode, message, the requested schema (form) or the
    URL (url mode), and why answers given did not fit (``problems``)."""
    params = request.get("params")
    params = params if isinstance(params, dict) else {}
    out: dict[str, Any] = {"method": request.get("method")}
    if request.get("method") == "elicitation/create":
        out["mode"] = params.get("mode", "form")
        out["message"] = params.get("message")
        if out["mode"] == "url":
            out["url"] = params.get("url")
        else:
            out["requested_schema"] = params.get("requestedSchema")
    if problems:
        out["problems"] = [dict(p) for p in problems]
    return out


def build_input_required(
    method: str,
    questions: Mapping[str, dict[str, Any]],
    parked: Mapping[str, Any],
    data: Mapping[str, Any] | None = None,
) -> InputRequiredError:
    """``input_required`` (exit 2): the questions no answer was at hand for, in ``data.input_requests``, and where
    a later command can answer them (``data.resume`` when the round was kept)."""
    first = next(iter(questions.values()), {})
    said = first.get("message")
    shown = f": {clip_text(said, 200)}" if isinstance(said, str) and said.strip() else ""
    fits = any(q.get("problems") for q in questions.values())
    if parked.get("resume"):
        how = f"answer it: bkmcp <server> --resume {parked['resume']} --input FIELD=VALUE (or --inputs JSON)"
    elif data and "result" in data:  # a legacy server asked mid-call and was answered cancel
        how = "the server was answered cancel; run the same command again with --input FIELD=VALUE (or --inputs JSON)"
    else:
        how = "run the same command again with --input FIELD=VALUE (or --inputs JSON)"
    return InputRequiredError(
        f"{method}: the server asks {len(questions)} question(s) "
        + ("the answers given do not fit" if fits else "no answer was given for")
        + shown,
        hint=how + "; the questions and their schemas are in data.input_requests",
        details={"input_requests": list(questions)},
        data={**dict(data or {}), "input_requests": dict(questions), **dict(parked)},
    )


def raise_unanswered(method: str, handles: Sequence[RequestHandle], data: Mapping[str, Any]) -> None:
    """A legacy server asked (``elicitation/create``) during ``method`` and some question had no answer at hand or
    answers that did not fit: it was answered ``cancel`` (never ``decline``), and the command reports
    ``input_required`` with the questions and what the server answered (docs/contract.md §5)."""
    questions: dict[str, dict[str, Any]] = {}
    for handle in handles:
        for asked in handle.asked:
            if not asked["given"]:
                questions[f"elicitation-{len(questions) + 1}"] = describe_question(asked["request"], asked["problems"])
    if questions:
        raise build_input_required(method, questions, {}, data)


def discover_tools(session: McpSession, ctx: OpContext) -> tuple[list[dict[str, Any]], int]:
    """Every page of ``tools/list`` with the contract.md §5 guards: (the catalogue exactly as received, pages read)."""
    tools, pages, _ttl_ms = discover_catalogue(session, ctx)
    return tools, pages


def discover_catalogue(session: McpSession, ctx: OpContext) -> tuple[list[dict[str, Any]], int, int]:
    """``discover_tools`` with how long the server says the catalogue stays fresh, in ms: the smallest ``ttlMs`` of
    its pages, 0 as soon as one page has none (or in an era without it). Kept catalogues: ``catalogue_kept_until``."""
    return discover_listing(session, ctx, LISTINGS["tools/list"])


def discover_listing(session: McpSession, ctx: OpContext, listing: Listing) -> tuple[list[dict[str, Any]], int, int]:
    """The one paginated listing of tools, resources, templates and prompts (``LISTINGS``): every page to the end
    with the contract.md §5 guards (at most ``MAX_PAGES`` pages and ``MAX_TOOLS`` items, a repeated cursor, a cycle,
    one name twice), the items exactly as received; (items, pages, the smallest ``ttlMs``). A ``list_changed`` that
    came before it is answered by it (``catalogue_read``), one that comes while it is read is not."""
    noun, method = listing.noun, listing.method
    session.core.catalogue_read(method)
    items: list[dict[str, Any]] = []
    ttl_ms: int | None = None
    names: dict[str, int] = {}
    cursors: list[str] = []
    cursor: str | None = None
    pages = 0

    def incomplete(reason: str, cause: BkmcpError | None = None) -> DiscoveryIncompleteError:
        return DiscoveryIncompleteError(
            f"{noun} discovery is incomplete: {reason} (after {pages} page(s), {len(items)} {noun}(s))",
            hint="the server's catalogue could not be read to the end; nothing is reported as complete",
            details={"pages": pages, f"{noun}s_seen": len(items)},
            data={"pages": pages, f"{noun}_count": len(items), "complete": False, listing.key: items},
            cause=cause,
        )

    while True:
        if pages >= MAX_PAGES:
            raise incomplete(f"more than {MAX_PAGES} pages")
        try:
            result = request_result(session, ctx, method, {"cursor": cursor} if cursor is not None else None)
        except RemoteError as exc:
            if pages == 0:
                raise
            raise incomplete(f"page {pages + 1} failed: {{cause}}", exc) from exc
        pages += 1
        rules = session.core.rules
        page_ttl = parse_ttl_ms(result) if rules is not None and rules.list_ttl else 0
        ttl_ms = page_ttl if ttl_ms is None else min(ttl_ms, page_ttl)
        for item in result[listing.key]:
            name = item[listing.id_key]
            if name in names:
                raise ProtocolError(
                    f"the server listed {noun} {name!r} twice (pages {names[name]} and {pages})",
                    hint=f"the catalogue is ambiguous; bkmcp never picks one of two {noun}s with the same name",
                    details={"duplicate": name},
                )
            names[name] = pages
            items.append(item)
        if len(items) > MAX_TOOLS:
            raise incomplete(f"more than {MAX_TOOLS} {noun}s")
        next_cursor = result.get("nextCursor")
        if next_cursor is None:
            break
        if next_cursor == cursor:
            raise incomplete(f"the server repeated cursor {clip_text(repr(next_cursor), 60)}")
        if next_cursor in cursors:
            raise incomplete(f"the cursors form a cycle (cursor {clip_text(repr(next_cursor), 60)} came back)")
        cursors.append(next_cursor)
        cursor = next_cursor
    ctx.log.debug(f"discovered {len(items)} {noun}(s) in {pages} page(s)")
    return items, pages, ttl_ms or 0


def catalogue_kept_until(ttl_ms: int, asked: float) -> float | None:
    """Until when a catalogue asked for at ``asked`` (monotonic) stays fresh by the server's word; None: no end of
    its own. The one freshness rule of every kept catalogue, the warm process's (10.5) and the resident's (10.3,
    its registry cache included), docs/contract.md §11.5 and §14: a kept catalogue is fresh until the first of

    - its positive ``ttlMs`` passing (``discover_listing``: the smallest of its pages; 0, absent or a legacy
      server: no such end),
    - the server's ``list_changed`` for it (``LIST_CHANGED``; ``catalogue_fresh``'s ``changed``),
    - the user or the platform asking for the catalogue itself (``--tools``, ``--check``, ``--resources``,
      ``--prompts``, ``refresh_tools``),
    - (resident) a change of the server's registry row."""
    return asked + ttl_ms / 1000 if ttl_ms > 0 else None


def catalogue_fresh(until: float | None, changed: bool, now: float) -> bool:
    """Whether a catalogue kept ``until`` (``catalogue_kept_until``) still holds at ``now``: no ``list_changed``
    since it was read, and its time not up."""
    return not changed and (until is None or now < until)


def usable_tools(
    session: McpSession, ctx: OpContext, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(kept, excluded): in the modern era the tools whose inputSchema declares an invalid x-mcp-header are
    excluded (docs/contract.md §5, 2026-07-28: clients MUST exclude them), with one warning per operation."""
    if session.rules is None or not session.rules.header_exclusion:
        return tools, []
    kept, excluded = split_excluded_tools(tools)
    if excluded:
        ctx.log.warn(render_excluded_warning(excluded), once_key="x-mcp-header")
    return kept, excluded


def find_tool(tools: Sequence[dict[str, Any]], name: str, server_name: str) -> dict[str, Any]:
    """The tool called exactly ``name``; ``mcp_tool_not_found`` with close names otherwise."""
    for tool in tools:
        if tool.get("name") == name:
            return tool
    names = [str(t.get("name")) for t in tools]
    close = closest_names(name, names)
    raise ToolNotFoundError(
        f"server {server_name!r} has no tool {name!r} ({len(names)} tools discovered)",
        hint=f"did you mean {', '.join(close)}?" if close else "list the server's tools",
        details={"suggestions": close},
        remedy=None if close else "list_tools",
    )


def declares_capability(session: McpSession, capability: str, *, extension: str | None = None) -> bool:
    """Whether the negotiated server declared ``capability`` (an object under ``capabilities``; with ``extension``,
    an object under ``capabilities.extensions``: SEP-2640's skills)."""
    declared = (session.core.capabilities or {}).get(capability)
    if extension is not None:
        declared = declared.get(extension) if isinstance(declared, dict) else None
    return isinstance(declared, dict)


def require_capability(
    session: McpSession, ctx: OpContext, capability: str, method: str, *, extension: str | None = None
) -> None:
    """``mcp_capability_unsupported`` before ``method`` is sent to a server that did not declare ``capability``
    (``resources``, ``prompts``, ``completions``; ``extensions`` with ``extension``: SEP-2640's skills): such a
    server gets no request (docs/contract.md §5). A session pinned to 2026-07-28 skipped ``server/discover``, so it
    asks it now, once: until then nothing was declared."""
    rules = session.core.rules
    if not session.core.heard and rules is not None and not rules.handshake:
        answer = session.request("server/discover", None, ctx, rules=rules)
        if answer.kind == "result":
            session.core.apply_discover(answer, rules.version)
    if declares_capability(session, capability, extension=extension):
        return
    capability = extension or capability
    raise CapabilityUnsupportedError(
        f"server {session.server.name!r} does not declare the {capability!r} capability; {method} was not sent",
        hint=f"the server offers no {capability}; bkmcp <server> --check shows what it declares",
        details={"capability": capability, "outcome": "not_sent"},
        request_sent=False,
    )


def read_resource(session: McpSession, ctx: OpContext, uri: str, pending: InputRound | None = None) -> dict[str, Any]:
    """``resources/read`` of one URI, the result as received; a URI the server does not know is
    ``mcp_resource_not_found`` in both eras: the legacy spec's -32002 (resource not found), and -32602 (invalid
    params: the 2026-07-28 spec's code, which legacy SDK servers answer too; ``uri`` is the request's only param)."""
    require_capability(session, ctx, "resources", "resources/read")
    try:
        return request_result(session, ctx, "resources/read", {"uri": uri}, pending, cancel=True)
    except ProtocolError as exc:
        if (exc.details.get("rpc_error") or {}).get("code") not in _UNKNOWN_RESOURCE_CODES:
            raise
        raise ResourceNotFoundError(
            f"server {session.server.name!r} has no resource {clip_text(repr(uri), 200)}",
            hint="list what it offers: bkmcp <server> --resources",
            details=dict(exc.details),
            data={"server": session.server.name, "uri": uri},
        ) from None


_UNKNOWN_RESOURCE_CODES = (-32002, -32602)


def list_kept(session: McpSession, ctx: OpContext, method: str) -> list[dict[str, Any]]:
    """The items of list ``method`` from ``ctx.sessions``: a warm session's kept catalogue while it is fresh
    (``catalogue_kept_until``, docs/contract.md §14), else listed now."""
    return (ctx.sessions or SessionSource()).listing(session, ctx, LISTINGS[method])


def list_resources(session: McpSession, ctx: OpContext) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(resources, templates): ``resources/list`` and ``resources/templates/list``, each paginated to the end
    (``discover_listing``), as received; a server with resources and no ``resources/templates/list`` at all
    ("method not found") has no templates. The one path of ``--resources`` and the resident's ``list_resources``."""
    require_capability(session, ctx, "resources", "resources/list")
    resources = list_kept(session, ctx, "resources/list")
    try:
        templates = list_kept(session, ctx, "resources/templates/list")
    except ProtocolError as exc:
        if (exc.details.get("rpc_error") or {}).get("code") != -32601:
            raise
        ctx.log.debug("the server has no resources/templates/list: no templates")
        templates = []
    return resources, templates


def list_prompts(session: McpSession, ctx: OpContext) -> list[dict[str, Any]]:
    """Every prompt (``prompts/list`` paginated to the end), as received: ``--prompts`` and ``list_prompts``."""
    require_capability(session, ctx, "prompts", "prompts/list")
    return list_kept(session, ctx, "prompts/list")


def get_prompt(
    session: McpSession,
    ctx: OpContext,
    name: str,
    prepare: Callable[[dict[str, Any]], Mapping[str, str] | None],
    pending: InputRound | None = None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """List the prompts, find ``name`` (``mcp_prompt_not_found``), let ``prepare(prompt)`` check the arguments
    (``invalid_mcp_arguments`` before sending), ``prompts/get`` once: (the prompt as listed, its result). ``prepare``
    returning None stops after the listing (prompt help): the result is then None. The one path of ``--prompt`` and
    the resident's ``get_prompt``; ``pending``: a kept input round answered first (``--resume``)."""
    prompt = find_prompt(list_prompts(session, ctx), name, session.server.name)
    arguments = prepare(prompt)
    if arguments is None:
        return prompt, None
    params: dict[str, Any] = {"name": name, **({"arguments": dict(arguments)} if arguments else {})}
    return prompt, request_result(session, ctx, "prompts/get", params, pending, cancel=True)


def find_prompt(prompts: Sequence[dict[str, Any]], name: str, server_name: str) -> dict[str, Any]:
    """The prompt called exactly ``name``; ``mcp_prompt_not_found`` with close names otherwise."""
    for prompt in prompts:
        if prompt.get("name") == name:
            return prompt
    close = closest_names(name, [str(p.get("name")) for p in prompts])
    raise PromptNotFoundError(
        f"server {server_name!r} has no prompt {clip_text(repr(name), 200)} ({len(prompts)} prompts listed)",
        hint=f"did you mean {', '.join(close)}?" if close else "list the server's prompts: bkmcp <server> --prompts",
        details={"suggestions": close},
    )


def complete_argument(
    session: McpSession, ctx: OpContext, ref: dict[str, str], argument: tuple[str, str], context: Mapping[str, str]
) -> dict[str, Any]:
    """``completion/complete`` (both eras alike; on 2026-07-28 HTTP ``Mcp-Method`` only, it names no ``Mcp-Name``):
    the values a server offers for one argument of a prompt (``ref`` ``{"type": "ref/prompt", "name"}``) or of a
    resource template (``{"type": "ref/resource", "uri"}``) being typed, ``argument`` (its name, the value so far),
    with the arguments already given as ``context.arguments``; the result's ``completion`` as received. A server
    that does not declare ``completions`` gets no request (``mcp_capability_unsupported``)."""
    require_capability(session, ctx, "completions", "completion/complete")
    params: dict[str, Any] = {"ref": ref, "argument": {"name": argument[0], "value": argument[1]}}
    if context:
        params["context"] = {"arguments": dict(context)}
    completion: dict[str, Any] = request_result(session, ctx, "completion/complete", params)["completion"]
    return completion


_progress_tokens = iter(range(1, 1 << 62))


def call_tool(
    session: McpSession,
    ctx: OpContext,
    name: str,
    arguments: dict[str, Any],
    tool: Mapping[str, Any] | None = None,
    pending: InputRound | None = None,
    *,
    as_task: bool = False,
) -> dict[str, Any]:
    """``tools/call`` sent exactly once, on every path (a task-only tool not sent ``as_task``: never); an unknown
    outcome is said so, never retried. The only further ``tools/call`` is the one a 2026-07-28 server asks for: the
    retry that carries the answers to its questions (``send_with_input``; ``pending``: a round kept by an earlier
    command).

    Returns the raw result (``isError: true`` included: whether that fails is the caller's rule). ``as_task``
    (``decide_task``): legacy ``params.task``, modern the tasks extension declared in this request's
    ``clientCapabilities``; the answer may then be a created task (``parse_created_task``; 7.3.1 waits for it). On a
    timeout or cancellation a call that was sent is cancelled on the wire: ``notifications/cancelled`` on a shared
    stream and in the legacy era; modern HTTP closes the call's stream.
    """
    refusal = build_task_refusal(tool, session.server.name) if tool is not None and not as_task else None
    if refusal is not None:  # its declaration says a plain call cannot work (docs/contract.md §5)
        raise refusal
    rules = session.core.rules
    assert rules is not None
    extra = build_param_headers(tool, arguments) if rules.method_headers else []
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    meta: dict[str, Any] = {}
    if as_task and rules.request_meta:
        meta[META_CLIENT_CAPABILITIES] = {"extensions": {TASKS_EXTENSION: {}}}
    elif as_task:
        params["task"] = {}  # the server chooses the ttl (2025-11-25: a requested ttl is optional)
    line: ProgressLine | None = None
    if ctx.progress is not None:  # docs/contract.md §5: progress for long calls
        line = ctx.progress(f"bkmcp-{next(_progress_tokens)}")
        meta["progressToken"] = line.token
        session.watch_progress(line.token, line.update)
    if meta:
        params["_meta"] = meta
    base = {"server": session.server.name, "tool": name}
    handles: list[RequestHandle] = []

    def send(current: dict[str, Any]) -> Message:
        handle = RequestHandle()
        handles.append(handle)
        try:
            return session.request("tools/call", current, ctx, extra_headers=extra, handle=handle)
        except KeyboardInterrupt:
            if handle.id is not None:
                _cancel(session, rules, handle.id, reason="interrupted by the user (Ctrl-C)")
            raise
        except RemoteError as exc:
            status = exc.http_status
            if exc.session_lost:
                raise ConnectionFailedError(
                    f"the server lost the session (HTTP {status}) while tools/call was in flight; "
                    "bkmcp never resends a call",
                    hint="the tool may or may not have run; check before calling again",
                    details={"http_status": status, "outcome": "unknown"},
                    data=dict(base),
                ) from None
            if status is not None:
                unknown = {"outcome": "unknown"} if status >= 500 else {}
                raise exc.copy(details={**exc.details, **unknown}, data=dict(base)) from None
            if isinstance(exc, McpTimeoutError) and request_was_sent(exc):
                _cancel(session, rules, handle.id, reason=f"timed out after {format_duration(ctx.deadline.seconds)}")
            changes: dict[str, Any] = {"data": {**base, **(exc.data or {})}}
            if request_was_sent(exc) and not isinstance(exc, (AuthRequiredError, PermissionDeniedError)):
                changes["details"] = {**exc.details, "outcome": "unknown"}
                changes["notes"] = (
                    *exc.notes,
                    "the call was sent and its outcome is unknown: check before calling again",
                )
            raise exc.copy(**changes)  # noqa: B904 - the same error, changed: its chain stays as it was

    try:
        if ctx.input is not None:
            answer = send_with_input(session, ctx, "tools/call", params, send, pending)
        else:
            answer = send(params)
    except InputRequiredError as exc:
        raise exc.copy(data={**base, **(exc.data or {})}) from None
    finally:
        if line is not None:
            session.watch_progress(line.token, None)
            line.end()
    declined = [m for handle in handles for m in handle.declined if m in DECLINED_CAPABILITIES]
    try:
        result = check_result("tools/call", answer, task=as_task)
    except RemoteError as exc:
        details = dict(exc.details)
        if isinstance(exc, ProtocolError) and answer.kind == "result":
            details["outcome"] = "unknown"
        if declined:
            raise CapabilityUnsupportedError(
                f"the tool asked for {', '.join(DECLINED_CAPABILITIES[m] for m in declined)}, which bkmcp "
                f"does not support ({exc.message})",
                details={"server_requests": declined, **details},
                data={**base, **(exc.data or {})},
            ) from None
        raise exc.copy(details=details, data={**base, **(exc.data or {})}) from None
    raise_unanswered("tools/call", handles, {**base, "result": result})
    if declined:
        raise CapabilityUnsupportedError(
            f"the tool asked for {', '.join(DECLINED_CAPABILITIES[m] for m in declined)} while running, which "
            "bkmcp declined; its result may be incomplete",
            hint="the raw result is in data.result; bkmcp never answers sampling; elicitation only when it can",
            details={"server_requests": declined},
            data={**base, "result": result},
        )
    return result


def _cancel(session: McpSession, rules: EraRules, request_id: Any, *, reason: str) -> None:
    """Ctrl-C, a cancellation or a timed-out call: ``notifications/cancelled`` (short bounded attempt; the
    lifecycle spec says a sender SHOULD after a timeout) where closing the stream does not cancel."""
    if not rules.cancel_notification and not session.transport.shared_stream:
        return
    try:
        session.notify(
            "notifications/cancelled",
            {"requestId": request_id, "reason": reason},
            Deadline(CANCEL_BUDGET),
            strict=False,
        )
    except BaseException as exc:  # noqa: B036 - a second Ctrl-C or any failure must not mask the first
        session.log.debug(f"sending notifications/cancelled failed: {type(exc).__name__}")


# -- 7.3.1 tasks: a call run as a task and waited for; a task's status, result, cancel and list; the handle store ------
# docs/contract.md §5 "Tasks". The wait polls tasks/get at the server's interval (task_poll_delay: bounded, jittered)
# within the operation's one Deadline; nothing polls past it, and nothing here resends tools/call.

TASK_STORE_LIMIT = 500  # handles kept in the local store (the oldest go first)
TASK_STORE_FILE = "tasks.json"


@dataclass
class TaskChoice:
    """What the command line asked of a call: ``--task`` (``wanted``), ``--detach`` (print the handle, not the
    result); ``on_handle`` hears each new state of the task's handle (the CLI's store)."""

    wanted: bool = False
    detach: bool = False
    on_handle: Callable[[dict[str, Any], str | None], None] | None = None  # (handle, the legacy session holding it)
    told: bool = False  # the user was told the call runs as a task (one stderr line, not two)


def task_request(session: McpSession, ctx: OpContext, method: str, task_id: str) -> dict[str, Any]:
    """One of ``tasks/get|result|cancel|update`` for ``task_id`` (modern: the extension declared, ``Mcp-Name`` the
    task id); a task the server no longer knows (-32602) is ``mcp_task_expired``."""
    params: dict[str, Any] = {"taskId": task_id}
    if session.rules is not None and session.rules.request_meta:
        params["_meta"] = {META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}}}
    try:
        return request_result(session, ctx, method, params)
    except ProtocolError as exc:
        if (exc.details.get("rpc_error") or {}).get("code") != -32602 or method == "tasks/result":
            raise
        raise TaskExpiredError(
            f"server {session.server.name!r} no longer knows task {clip_text(repr(task_id), 80)} "
            "(its ttl passed, or it never made one with that id)",
            hint="a task lives as long as its ttl; run the call again if its result is still needed",
            details=dict(exc.details),
            data={"server": session.server.name, "mcp_task_id": task_id},
        ) from None


def refresh_task_handle(handle: dict[str, Any], view: Mapping[str, Any], era: str | None) -> dict[str, Any]:
    """``handle`` with what a ``tasks/get`` answer says now (status, message, ttl, poll interval)."""
    fresh = build_task_handle(
        {"createdAt": handle.get("created_at"), **view},
        server=handle["server"],
        tool=handle.get("tool"),
        era=era,
        version=handle.get("protocol_version"),
        transport=handle.get("transport", ""),
    )
    for key in ("ttl_ms", "poll_interval_ms"):
        if fresh[key] is None:
            fresh[key] = handle.get(key)
    return fresh


def _call_result(result: Any, method: str) -> dict[str, Any]:
    if not isinstance(result, dict) or not isinstance(result.get("content"), list):
        raise ProtocolError(
            f"{method}: the task's result is no CallToolResult (no content array)", data={"result": result}
        )
    return result


def task_outcome(
    session: McpSession, ctx: OpContext, view: Mapping[str, Any], handle: dict[str, Any]
) -> dict[str, Any]:
    """A terminal task's result (the call's own ``CallToolResult``, ``isError`` included), or its error:
    ``mcp_task_cancelled``, ``mcp_task_failed`` (the JSON-RPC error the call ended with)."""
    status, task_id = view.get("status"), handle["mcp_task_id"]
    base = {"server": session.server.name, "tool": handle.get("tool"), "task": handle}
    said = f": {handle['status_message']}" if handle.get("status_message") else ""
    if status == "cancelled":
        raise TaskCancelledError(
            f"task {clip_text(repr(task_id), 80)} of server {session.server.name!r} was cancelled{said}",
            hint="the task ended without a result; run the call again if it is still needed",
            data=base,
        )
    if session.rules is not None and session.rules.request_meta:  # the extension: the outcome is inline
        if status == "completed":
            return _call_result(view.get("result"), "tasks/get")
        raw_error = view.get("error")
        error: dict[str, Any] = raw_error if isinstance(raw_error, dict) else {}
        text = error.get("message") if isinstance(error.get("message"), str) else handle.get("status_message")
        raise TaskFailedError(
            f"task {clip_text(repr(task_id), 80)} of server {session.server.name!r} failed"
            + (f": {clip_text(printable(text), 300)}" if text else ""),
            hint="the server reported the task as failed; see error.rpc_error",
            details={"rpc_error": error} if error else {},
            data=base,
        )
    try:  # the 2025-11-25 core: tasks/result answers what the call itself would have (a result or an error)
        result = task_request(session, ctx, "tasks/result", task_id)
    except ProtocolError as exc:
        rpc = exc.details.get("rpc_error")
        if rpc is None:
            raise
        raise TaskFailedError(
            f"task {clip_text(repr(task_id), 80)} of server {session.server.name!r} {status}: "
            f"{clip_text(printable(str(rpc.get('message', ''))), 300)}",
            hint="the call the task ran ended with a JSON-RPC error; see error.rpc_error",
            details={"rpc_error": rpc},
            data=base,
        ) from None
    return _call_result(result, "tasks/result")


def _pause(deadline: Deadline, seconds: float) -> None:
    """Sleep ``seconds`` unless interrupted (a one-shot Ctrl-C lands here; a warm client's wakes the event)."""
    import threading

    event = threading.Event()
    interrupt = deadline.interrupt
    key = interrupt.hook(event.set) if interrupt is not None else None
    try:
        event.wait(max(seconds, 0.0))
    finally:
        if interrupt is not None and key is not None:
            interrupt.unhook(key)
    if interrupt is not None and interrupt.fired:
        raise KeyboardInterrupt


def await_task(
    session: McpSession, ctx: OpContext, handle: dict[str, Any], choice: TaskChoice | None = None
) -> dict[str, Any]:
    """Poll ``tasks/get`` until the task ends (``task_outcome``): the first at once, each next after
    ``task_poll_delay`` of the interval the server last gave, within ``ctx.deadline``: when it is spent the wait
    ends (the task goes on) as ``mcp_task_running``. ``ctx.task`` follows the handle (a Ctrl-C reports it); on a
    terminal or with ``-v`` each status is shown (``Log.progress``). A task asking for input ends the wait as
    ``mcp_capability_unsupported`` (bkmcp answers no elicitation yet), the task left as it is."""
    import random

    task_id = handle["mcp_task_id"]
    started = time.monotonic()
    ctx.task = handle
    shown = ctx.progress is not None
    first = True  # the first poll goes at once, as the TypeScript SDK's requestStream does (sdk 1.32.2,
    # shared/protocol.js): a task that ends at once costs a round trip, not an interval
    try:
        while True:
            delay = 0.0 if first else task_poll_delay(handle.get("poll_interval_ms"), random.random())
            first = False
            left = ctx.deadline.left()
            if left <= delay or left <= 0:
                _pause(ctx.deadline, left)
                raise _still_running(session, ctx, handle)
            _pause(ctx.deadline, delay)
            try:
                view = task_request(session, ctx, "tasks/get", task_id)
            except McpTimeoutError:
                raise _still_running(session, ctx, handle) from None
            check_task_view(view, "tasks/get")
            handle = ctx.task = refresh_task_handle(handle, view, session.era)
            status = view["status"]
            if shown:
                said = f": {handle['status_message']}" if handle.get("status_message") else ""
                ctx.log.progress(f"task {status}{said} ({time.monotonic() - started:.1f}s)")
            if status in TASK_TERMINAL:
                session.keep_session = False  # nothing lives in the session any more: it may end
                if choice is not None and choice.on_handle is not None:
                    choice.on_handle(handle, None)
                return task_outcome(session, ctx, view, handle)
            if status == "input_required":
                raise CapabilityUnsupportedError(
                    f"task {clip_text(repr(task_id), 80)} of server {session.server.name!r} needs input from the "
                    "client (status input_required), which bkmcp cannot give yet; the task is left waiting",
                    hint="answer it from a client with elicitation, or cancel it (--task-cancel)",
                    details={"capability": "elicitation", "outcome": "task_waiting"},
                    data={"server": session.server.name, "tool": handle.get("tool"), "task": handle},
                )
    finally:
        if shown:
            ctx.log.progress_end()


def _still_running(session: McpSession, ctx: OpContext, handle: dict[str, Any]) -> TaskRunningError:
    return TaskRunningError(
        f"the wait for task {clip_text(repr(handle['mcp_task_id']), 80)} ended after "
        f"{format_duration(ctx.deadline.seconds)} (the operation's budget); the task goes on (bkmcp detached)",
        hint="wait again with --task-result ID --wait, or cancel it with --task-cancel ID",
        details={"outcome": "task_running"},
        data={"server": session.server.name, "tool": handle.get("tool"), "task": handle},
    )


def plan_task(session: McpSession, ctx: OpContext, tool: Mapping[str, Any], choice: TaskChoice) -> bool:
    """``decide_task`` for this session (its era, the capabilities it was told), and the one stderr line that
    says a task-only tool runs as a task without ``--task``."""
    known = session.core.capabilities if session.core.heard else None  # a pinned modern server: never said
    as_task = decide_task(session.era, known, tool, choice.wanted, session.server.name)
    if as_task and not choice.wanted and tool_task_support(tool) == "required":
        choice.told = True
        name = tool.get("name")
        ctx.log.note(f'tool {name!r} can only run as a task (execution.taskSupport "required"): running it as one')
    return as_task


def run_created_task(
    session: McpSession, ctx: OpContext, name: str, created: dict[str, Any], choice: TaskChoice
) -> dict[str, Any]:
    """A call the server answered with a task: its handle (``--detach``), or the task waited for. The handle is
    given to ``choice.on_handle`` as soon as it exists (never lost: a Ctrl-C or a timeout can come next)."""
    server = session.server
    handle = build_task_handle(
        created,
        server=server.name,
        tool=name,
        era=session.era,
        version=session.protocol_version,
        transport=server.type,
    )
    ctx.task = handle
    holder = session.core.session_id if session.transport.has_sessions else None
    session.keep_session = holder is not None  # a legacy HTTP task may be bound to its session (TypeScript SDK)
    if choice.on_handle is not None:
        choice.on_handle(handle, holder)
    if choice.detach:
        return {"server": server.name, "tool": name, "task": handle}
    if not choice.wanted and not choice.told:
        ctx.log.note(f"the server runs tool {name!r} as a task; waiting for its result")
    return {"server": server.name, "tool": name, "result": await_task(session, ctx, handle, choice)}


def run_task_action(
    session: McpSession,
    ctx: OpContext,
    action: str,
    task_id: str,
    handle: dict[str, Any] | None,
    *,
    wait: bool = False,
) -> dict[str, Any]:
    """``--task-status``, ``--task-result [--wait]``, ``--task-cancel`` of ``task_id`` on this session. ``handle``:
    the local store's (else one is made from the server's answer). Data: ``{"server", "task"}``, plus ``tool`` and
    ``result`` for a result."""
    server = session.server
    if handle is None:
        handle = build_task_handle(
            {"taskId": task_id},
            server=server.name,
            tool=None,
            era=session.era,
            version=session.protocol_version,
            transport=server.type,
        )
    if action == "cancel":
        answer = task_request(session, ctx, "tasks/cancel", task_id)
        status = answer.get("status") if isinstance(answer.get("status"), str) else "cancel_requested"
        # the session stays (a later status or result reads the cancelled task there, then ends it)
        return {"server": server.name, "task": {**handle, "status": status}}
    view = task_request(session, ctx, "tasks/get", task_id)
    check_task_view(view, "tasks/get")
    handle = ctx.task = refresh_task_handle(handle, view, session.era)
    if action == "status":
        session.keep_session = session.keep_session and view["status"] not in TASK_TERMINAL
        return {"server": server.name, "task": handle}
    if view["status"] in TASK_TERMINAL:
        session.keep_session = False
        result = task_outcome(session, ctx, view, handle)
    elif wait:
        result = await_task(session, ctx, handle)
        handle = ctx.task or handle
    else:
        raise TaskRunningError(
            f"task {clip_text(repr(task_id), 80)} of server {server.name!r} is still {view['status']}; "
            "its result is not there yet",
            hint="wait for it with --task-result ID --wait (within --timeout)",
            details={"outcome": "task_running"},
            data={"server": server.name, "tool": handle.get("tool"), "task": handle},
        )
    return {"server": server.name, "tool": handle.get("tool"), "result": result, "task": handle}


class ResumedSessions(SessionSource):
    """The session for a stored task handle (``entry``): a legacy HTTP task lives in the session that made it
    (the TypeScript SDK answers for it only there), so that session's id is used again, without ``initialize``,
    and left open while the task lives; anything else negotiates as usual."""

    def __init__(self, entry: Mapping[str, Any] | None) -> None:
        self.entry = entry or {}

    def ready(self, session: McpSession, ctx: OpContext) -> None:
        held, version = self.entry.get("session_id"), self.entry.get("protocol_version")
        if isinstance(held, str) and held and session.transport.has_sessions and version in LEGACY_VERSIONS:
            ctx.log.debug("continuing the legacy session that holds the task (no initialize)")
            session.core.adopt_session(era_rules(version), held)
            session.keep_session = True
            return
        negotiate(session, ctx)


def list_server_tasks(session: McpSession, ctx: OpContext) -> list[dict[str, Any]] | None:
    """The server's ``tasks/list`` (every page, the one listing path) where a legacy server offers it
    (``capabilities.tasks.list``); None elsewhere (the extension has no list)."""
    tasks = (session.core.capabilities or {}).get("tasks")
    if session.era == "modern" or not isinstance(tasks, dict) or not isinstance(tasks.get("list"), dict):
        return None
    return discover_listing(session, ctx, LISTINGS["tasks/list"])[0]


def task_store_path(env: Mapping[str, str]) -> str | None:
    """Where this user's task handles are kept: ``$XDG_STATE_HOME/bkmcp/tasks.json``, else
    ``~/.local/state/bkmcp/tasks.json`` (the XDG base directory rule for state); None without either."""
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        home = env.get("HOME", "")
        if not os.path.isabs(home):
            return None
        state = os.path.join(home, ".local", "state")
    return os.path.join(state, "bkmcp", TASK_STORE_FILE)


def update_task_store(
    path: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]], *, create: bool = True
) -> list[dict[str, Any]]:
    """The store's handles after ``change`` (under an exclusive lock; written back only when changed). The file
    is 0600 in a 0700 folder, opened without following a symlink, and must be this user's. Without ``create`` a
    missing store reads as empty and is not made."""
    import fcntl

    folder = os.path.dirname(path)
    if not create and not os.path.exists(path):
        return change([])
    os.makedirs(folder, mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        if os.fstat(fd).st_uid != os.getuid():
            raise OSError(f"{path} is not yours")
        os.fchmod(fd, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        try:
            stored = parse_json(b"".join(chunks).decode("utf-8")) if chunks else {}
        except (ValueError, UnicodeDecodeError):
            stored = {}
        entries = stored.get("tasks") if isinstance(stored, dict) else None
        entries = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
        changed = change(list(entries))
        if changed != entries:
            os.lseek(fd, 0, os.SEEK_SET)
            os.ftruncate(fd, 0)
            os.write(fd, (dump_json({"tasks": changed}, indent=1) + "\n").encode("utf-8"))
        return changed
    finally:
        os.close(fd)


def build_store_change(
    handle: Mapping[str, Any], config_file: str, now: int, session_id: str | None = None
) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
    """The change that records ``handle`` (over the same task's older entry, whose ``session_id`` it keeps) and
    forgets handles whose ttl passed, keeping at most ``TASK_STORE_LIMIT``. ``session_id``: the legacy HTTP
    session the task lives in (``ResumedSessions``; not a credential: sessions never authenticate, 2025-11-25
    security best practices)."""

    def change(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        key = (handle["server"], config_file, handle["mcp_task_id"])
        kept = [
            e
            for e in entries
            if (e.get("server"), e.get("config_file"), e.get("mcp_task_id")) != key
            and not (isinstance(e.get("expires_at"), (int, float)) and e["expires_at"] < now)
        ]
        ttl = handle.get("ttl_ms")
        previous = next(
            (e for e in entries if (e.get("server"), e.get("config_file"), e.get("mcp_task_id")) == key), {}
        )
        saved = previous.get("saved_at", now)
        entry = {
            **previous,
            **handle,
            **({"session_id": session_id} if session_id else {}),
            "config_file": config_file,
            "saved_at": saved,
            "expires_at": saved + -(-ttl // 1000) if isinstance(ttl, int) else None,  # whole seconds: exact JSON
        }
        return [*kept, entry][-TASK_STORE_LIMIT:]

    return change


# -- 7.4 the CLI's operations: one session each (check, tools, dry-run) ------------------------------------------------


def _take_negotiated(data: dict[str, Any], core: ClientSession) -> None:
    data.update(
        protocol_version=core.protocol_version,
        era=core.era,
        server_info=core.server_info,
        capabilities=core.capabilities,
    )
    if core.instructions is not None:
        data["instructions"] = core.instructions
    else:
        data.pop("instructions", None)


def run_check(server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> dict[str, Any]:
    """``--check`` data (contract.md §7); on failure raises a RemoteError whose ``data`` has the staged ``checks``."""
    checks = {"config": "passed", "connection": "not_run", "protocol": "not_run", "tools": "not_run"}
    data: dict[str, Any] = {
        "server": server.name,
        "config_file": server.config_file,
        "transport": server.type,
        "protocol_version": None,
        "era": None,
        "server_info": {},
        "capabilities": {},
        "checks": checks,
        "authentication": {"source": server.auth_source, "discovery_accepted": False},
        "tool_count": 0,
        "excluded_count": 0,
        "complete": False,
        "elapsed_ms": 0,
    }
    stage = "connection"
    session = McpSession(server, insecure=insecure, log=ctx.log)
    try:
        try:
            try:
                negotiate(session, ctx, server_info=True)
            finally:
                if session.responses:
                    checks["connection"] = "passed"
                    stage = "protocol"
            checks["protocol"] = "passed"
            _take_negotiated(data, session.core)
            stage = "tools"
            tools, excluded = usable_tools(session, ctx, discover_tools(session, ctx)[0])
            _take_negotiated(data, session.core)  # a tentative modern era may have turned legacy (contract §5)
            checks["tools"] = "passed"
            data.update(tool_count=len(tools), excluded_count=len(excluded), complete=True)
            data["authentication"]["discovery_accepted"] = True
        except RemoteError as exc:
            checks[stage] = "failed"
            data.update(protocol_version=session.protocol_version, era=session.era)
            data["elapsed_ms"] = ctx.deadline.elapsed_ms()
            extra = exc.data or {}  # what discovery got as far as
            data.update({key: extra[key] for key in ("pages", "tool_count", "complete") if key in extra})
            raise exc.copy(data=data) from None
    finally:
        session.close(ctx.deadline)
    data["elapsed_ms"] = ctx.deadline.elapsed_ms()
    return data


def run_tools(server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> dict[str, Any]:
    """``--tools`` data (contract §7): server, protocol_version, tool_count, complete, tools (as received), excluded."""
    sessions = ctx.sessions or SessionSource()
    session = sessions.start(server, ctx, insecure=insecure)

    def data(tools: list[dict[str, Any]], excluded: list[dict[str, Any]], complete: bool) -> dict[str, Any]:
        return {
            "server": server.name,
            "protocol_version": session.protocol_version,
            "tool_count": len(tools),
            "complete": complete,
            "tools": tools,
            "excluded": excluded,
        }

    try:
        try:
            sessions.ready(session, ctx)
            tools, excluded = usable_tools(session, ctx, sessions.discover(session, ctx)[0])
        except RemoteError as exc:
            partial, excluded = (exc.data or {}).get("tools", []), []
            if session.rules is not None and session.rules.header_exclusion:
                partial, excluded = split_excluded_tools(partial)
            raise exc.copy(data=data(partial, excluded, False))  # noqa: B904 - the same error with its data: its chain stays
    finally:
        sessions.done(session, ctx)
    return data(tools, excluded, True)


def run_call(
    server: ResolvedServer,
    ctx: OpContext,
    name: str,
    *,
    insecure: bool,
    prepare: Callable[[dict[str, Any]], dict[str, Any] | None],
    pending: InputRound | None = None,
    task: TaskChoice | None = None,
) -> dict[str, Any]:
    """Discover, find tool ``name``, let ``prepare(tool)`` build and check the arguments, call it once
    (``pending``: the input round of an earlier command answered first, ``--resume``).

    ``prepare`` (the front end's: flags or ``--body``, local validation) returns the arguments, or None to stop
    after discovery (tool help): then the data is ``{"server", "tool", "schema": tool}`` and nothing is called.
    The call's data is ``{"server", "tool", "result"}`` with the result as received (``isError`` included). A call
    that runs as a task (``decide_task``: ``task.wanted``, a task-only tool, a modern server offering tasks) is
    waited for (7.3.1), or with ``task.detach`` its data is ``{"server", "tool", "task": handle}``.
    """
    choice = task or TaskChoice()
    sessions = ctx.sessions or SessionSource()
    try:
        session = sessions.start(server, ctx, insecure=insecure)
        try:
            sessions.ready(session, ctx)
        except BaseException:
            sessions.done(session, ctx)
            raise
    except RemoteError as exc:  # e.g. a stdio server that exits at start: the envelope still names the call
        raise exc.copy(data={"server": server.name, "tool": name, **(exc.data or {})})  # noqa: B904 - its chain stays
    try:
        tools, excluded = usable_tools(session, ctx, sessions.discover(session, ctx)[0])
        reject_excluded_tool(excluded, name, server.name)
        tool = find_tool(tools, name, server.name)
        arguments = prepare(tool)
        if arguments is None:
            return {"server": server.name, "tool": name, "schema": tool}
        as_task = plan_task(session, ctx, tool, choice)
        result = call_tool(session, ctx, name, arguments, tool, pending, as_task=as_task)
        created = parse_created_task(result, session.era) if as_task else None
        if created is not None:
            return run_created_task(session, ctx, name, created, choice)
        if choice.wanted:
            ctx.log.note(f"the server answered tool {name!r} at once: no task was made")
    finally:
        sessions.done(session, ctx)
    return {"server": server.name, "tool": name, "result": result}


def run_on_session(
    server: ResolvedServer,
    ctx: OpContext,
    work: Callable[[McpSession], dict[str, Any]],
    *,
    insecure: bool,
    sessions: SessionSource | None = None,
) -> dict[str, Any]:
    """``work`` done on a session of ``sessions`` (else ``ctx.sessions``: a new one, or a warm one lent), negotiated
    first, given back however it ends; a remote failure's data names the server."""
    sessions = sessions or ctx.sessions or SessionSource()
    try:
        session = sessions.start(server, ctx, insecure=insecure)
        try:
            sessions.ready(session, ctx)
            return work(session)
        finally:
            sessions.done(session, ctx)
    except RemoteError as exc:
        raise exc.copy(data={"server": server.name, **(exc.data or {})})  # noqa: B904 - its chain stays


def run_resources(server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> dict[str, Any]:
    """``--resources`` data (docs/contract.md §7): every resource and resource template, as received."""

    def work(session: McpSession) -> dict[str, Any]:
        resources, templates = list_resources(session, ctx)
        return {
            "server": server.name,
            "protocol_version": session.protocol_version,
            "resource_count": len(resources),
            "template_count": len(templates),
            "complete": True,
            "resources": resources,
            "templates": templates,
        }

    return run_on_session(server, ctx, work, insecure=insecure)


def describe_resource_brief(item: Mapping[str, Any]) -> dict[str, Any]:
    """One resource or template for ``--resources --brief``: name, URI (or URI template), MIME type and the first
    description line."""
    description = item.get("description")
    lines = description.strip().splitlines() if isinstance(description, str) else []
    out = {key: item[key] for key in ("name", "uri", "uriTemplate", "mimeType") if key in item}
    out["summary"] = lines[0].strip() if lines else ""
    return out


def run_read(
    server: ResolvedServer, ctx: OpContext, uri: str, *, insecure: bool, pending: InputRound | None = None
) -> dict[str, Any]:
    """``--read URI`` data: ``{"server", "uri", "result"}``, the result with every content item as received."""

    def work(session: McpSession) -> dict[str, Any]:
        try:
            return {"server": server.name, "uri": uri, "result": read_resource(session, ctx, uri, pending)}
        except InputRequiredError as exc:
            raise exc.copy(data={"server": server.name, "uri": uri, **(exc.data or {})}) from None

    return run_on_session(server, ctx, work, insecure=insecure)


def run_prompts(server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> dict[str, Any]:
    """``--prompts`` data: every prompt, as received."""

    def work(session: McpSession) -> dict[str, Any]:
        prompts = list_prompts(session, ctx)
        return {
            "server": server.name,
            "protocol_version": session.protocol_version,
            "prompt_count": len(prompts),
            "complete": True,
            "prompts": prompts,
        }

    return run_on_session(server, ctx, work, insecure=insecure)


def run_prompt(
    server: ResolvedServer,
    ctx: OpContext,
    name: str,
    *,
    insecure: bool,
    prepare: Callable[[dict[str, Any]], dict[str, str] | None],
    pending: InputRound | None = None,
) -> dict[str, Any]:
    """List the prompts, find ``name``, let ``prepare(prompt)`` check the arguments, ``prompts/get`` once. As
    ``run_call``: ``prepare`` returning None stops after the listing (prompt help: ``{"server", "prompt",
    "definition"}``); else ``{"server", "prompt", "result"}``."""

    def work(session: McpSession) -> dict[str, Any]:
        try:
            prompt, result = get_prompt(session, ctx, name, prepare, pending)
        except InputRequiredError as exc:
            raise exc.copy(data={"server": server.name, "prompt": name, **(exc.data or {})}) from None
        if result is None:
            return {"server": server.name, "prompt": name, "definition": prompt}
        return {"server": server.name, "prompt": name, "result": result}

    return run_on_session(server, ctx, work, insecure=insecure)


class SkillSessions(SessionSource):
    """A skill command's session (SEP-2640): new, closed at the end, and the only kind that declares the skills
    extension (``SKILLS_CAPABILITIES``) — every other session declares no client capability."""

    def start(self, server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> McpSession:
        session = McpSession(server, insecure=insecure, log=ctx.log)
        session.core.client_capabilities = SKILLS_CAPABILITIES
        return session


def list_skills(session: McpSession, ctx: OpContext) -> list[dict[str, Any]]:
    """``skills/list`` to the end (the one pagination), only to a server that declares the extension."""
    require_capability(session, ctx, "extensions", "skills/list", extension=SKILLS_EXTENSION)
    return discover_listing(session, ctx, LISTINGS["skills/list"])[0]


def describe_skill(entry: Mapping[str, Any]) -> dict[str, Any]:
    """One skill of ``--skills``: its name, URI, frontmatter as listed and how many files it lists (null: none
    listed, a dynamic skill, which ``--skill`` refuses); no file is read."""
    listed = entry.get("resources")
    return {
        "name": skill_name(entry),
        "uri": entry.get("uri"),
        "frontmatter": entry.get("frontmatter"),
        "file_count": len(listed) if isinstance(listed, list) else None,
    }


def run_skills(server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> dict[str, Any]:
    """``--skills`` data: every listed skill (``describe_skill``); nothing read ahead (SEP-2640: no file before the
    skill is loaded)."""

    def work(session: McpSession) -> dict[str, Any]:
        skills = list_skills(session, ctx)
        return {
            "server": server.name,
            "protocol_version": session.protocol_version,
            "skill_count": len(skills),
            "complete": True,
            "skills": [describe_skill(entry) for entry in skills],
        }

    return run_on_session(server, ctx, work, insecure=insecure, sessions=SkillSessions())


def find_skill(skills: Sequence[dict[str, Any]], name: str, server_name: str) -> dict[str, Any]:
    """The one skill named ``name`` (or whose URI is ``name``): names are labels, so two skills of one name need
    the URI; ``mcp_skill_not_found`` otherwise, with close names."""
    found = [entry for entry in skills if entry.get("uri") == name] or [
        entry for entry in skills if skill_name(entry) == name
    ]
    if len(found) == 1:
        return found[0]
    if found:
        uris = [str(entry.get("uri")) for entry in found]
        raise SkillNotFoundError(
            f"server {server_name!r} has {len(found)} skills named {clip_text(repr(name), 100)}: give the URI of one",
            hint="bkmcp <server> --skill " + " | ".join(uris[:5]),
            details={"suggestions": uris},
        )
    close = closest_names(name, [skill_name(entry) for entry in skills])
    raise SkillNotFoundError(
        f"server {server_name!r} has no skill {clip_text(repr(name), 200)} ({len(skills)} skills listed)",
        hint=f"did you mean {', '.join(close)}?" if close else "list the server's skills: bkmcp <server> --skills",
        details={"suggestions": close},
    )


def load_skill(session: McpSession, ctx: OpContext, name: str) -> dict[str, Any]:
    """The skill ``name``'s files read one by one through ``resources/read`` (SKILL.md first), each verified
    against the listing before the next is read (``verify_skill_file``); the first that fails ends the command with
    ``skill_unverified`` and no content. ``--skill`` and the resident's ``read_skill``, one path. ``{"skill",
    "uri", "frontmatter", "files": [{"path", "uri", "mimeType", "bytes", "sha256", "text" | "blob"}]}``."""
    import base64
    import hashlib

    entry = find_skill(list_skills(session, ctx), name, session.server.name)
    files = []
    for file in parse_skill_files(entry):
        result = read_resource(session, ctx, file.uri)
        data = verify_skill_file(entry, file, result)
        item = result["contents"][0]
        shown: dict[str, Any] = {
            "path": "/".join(file.parts),
            "uri": file.uri,
            "mimeType": item.get("mimeType"),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
        }
        try:
            shown["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            shown["blob"] = base64.b64encode(data).decode("ascii")
        files.append(shown)
    return {"skill": skill_name(entry), "uri": entry["uri"], "frontmatter": entry.get("frontmatter"), "files": files}


def run_skill(server: ResolvedServer, ctx: OpContext, name: str, *, insecure: bool) -> dict[str, Any]:
    """``--skill NAME`` data: ``{"server", **load_skill}``."""

    def work(session: McpSession) -> dict[str, Any]:
        return {"server": server.name, **load_skill(session, ctx, name)}

    return run_on_session(server, ctx, work, insecure=insecure, sessions=SkillSessions())


def build_dry_run(server: ResolvedServer, tool: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Dry-run data (docs/contract.md §7, O02): what would be sent, redacted; nothing remote verified."""
    data: dict[str, Any] = {"dry_run": True, "server": server.name, "tool": tool, "transport": server.type}
    if server.type == "http":
        data["url"] = redact_url(server.url or "")
        # credential headers by name, and any other header that repeats a known secret value (docs/contract.md §4)
        data["headers"] = {k: server.redactor.scrub(v) for k, v in redact_headers(server.headers).items()}
    else:
        data["command"] = server.command
        data["args"] = [server.redactor.scrub(a) for a in server.args]
        data["env"] = {name: REDACTED for name in server.env}
    data["arguments"] = arguments
    data["unverified"] = ["tool_exists", "input_schema", "authentication", "permissions"]
    return data


# ======================================================================================================
# 8. Schema flags — deferred in the pyz
# ======================================================================================================


# -- 8.1 flag records and property kinds (ToolFlag, BodyOnlyField) -----------------------------------------------------

RESERVED_OPTION_NAMES = frozenset(
    "help h check tools config body timeout jq raw r context dry-run verbose v insecure format resident registry "
    "version keep-alive input inputs input-action resume out max-blob-bytes task detach".split()
)


# Rules (docs/contract.md §6, seed §6): flags are named exactly as the property; one declared type gets a flag of that
# type, any other schema a JSON-value flag (its JSON text says the type); what a flag cannot express unambiguously
# (a name that cannot be an option, a remote or recursive $ref) stays usable through --body. Only what the user typed
# is sent.

FLAG_TYPES = ("string", "integer", "number", "boolean", "array", "object")
_FLAG_METAVAR = {
    "string": "STRING",
    "integer": "INTEGER",
    "number": "NUMBER",
    "array": "JSON-ARRAY",
    "object": "JSON-OBJECT",
    "json": "JSON",
}
COMBINATORS = ("anyOf", "oneOf", "allOf")
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
JSON_INTEGER = lazy_re(r"-?(?:0|[1-9][0-9]*)")
JSON_NUMBER = lazy_re(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
IDENTIFIER = lazy_re(r"[A-Za-z_][A-Za-z0-9_]*")
PLAIN_ASCII_NAME = lazy_re(r"[!#-~]+")  # printable ASCII without space and '"': always a fine flag name
FAST_FLAG_NAME = lazy_re(r"[!#-,.-<>-~][!#-<>-~]*")  # the same, minus '=' and a leading '-'
HARD_KEYWORDS = frozenset(REF_KEYWORDS + COMBINATORS)
FLAG_TYPE_SET = frozenset(FLAG_TYPES)


@dataclass(slots=True)
class ToolFlag:
    """A property that has a flag: ``--<name>`` typed by ``kind`` (one of FLAG_TYPES, or "json": any JSON value,
    checked against the property's schema by validation)."""

    name: str
    kind: str
    required: bool
    schema: dict[str, Any]  # local $refs followed; of a nullable property: its non-null branch with its annotations
    nullable: bool = False  # "T or null": the flag gives T; JSON null only through --body (docs/contract.md §6)

    @property
    def option(self) -> str:
        return f"--{self.name}"

    @property
    def usage(self) -> str:
        """``--limit INTEGER`` / ``--enabled=true|false``."""
        if self.kind == "boolean":
            return f"--{self.name}=true|false"
        return f"--{self.name} {_FLAG_METAVAR[self.kind]}"


@dataclass(slots=True)
class BodyOnlyField:
    """A property (or required name) that gets no flag; it is set through ``--body``."""

    name: str
    reason: str
    required: bool
    schema: Any = None


@dataclass(slots=True)
class ToolFlags:
    """What a tool's ``inputSchema`` offers on the command line."""

    flags: dict[str, ToolFlag]
    body_only: dict[str, BodyOnlyField]
    required: tuple[str, ...]
    notes: tuple[str, ...] = ()


def schema_object(tool: Mapping[str, Any]) -> dict[str, Any] | None:
    schema = tool.get("inputSchema") if type(tool) is dict or isinstance(tool, Mapping) else None
    return schema if isinstance(schema, dict) else None


def flag_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a ``--name`` flag (None when it can)."""
    if not name:
        return "an empty name cannot be a flag"
    if name.startswith("-"):
        return "a name starting with '-' cannot be a flag"
    if "=" in name:
        return "a name containing '=' cannot be a flag (--name=value would split it)"
    if not PLAIN_ASCII_NAME.fullmatch(name):  # printable ASCII (the common case) needs no per-character look
        import unicodedata

        if any(ch.isspace() or unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp") for ch in name):
            return "a name containing whitespace or control characters cannot be a flag"
    if name in RESERVED_OPTION_NAMES:
        own = f"-{name}" if len(name) == 1 else f"--{name}"
        return f"the name collides with bkmcp's own option {own} (reserved names are never tool flags)"
    return None


_SIMPLE_TYPES = ("string", "integer", "number", "boolean")
_NULL_ANNOTATIONS = frozenset({"type", "title", "description"})


def nullable_simple(schema: dict[str, Any]) -> dict[str, Any] | None:
    """The non-null schema of "one simple type or null" (docs/contract.md §6): ``type: [T, "null"]``, or
    ``anyOf``/``oneOf`` of one simple schema and ``{type: null}``; None for anything else. The result keeps the
    property's own annotations (description, default, enum…) beside the branch's."""
    declared = schema.get("type")
    if isinstance(declared, list):
        simple = [t for t in declared if t != "null"]
        if len(declared) == 2 and len(simple) == 1 and simple[0] in _SIMPLE_TYPES:
            if any(k in schema for k in (*REF_KEYWORDS, *COMBINATORS)):
                return None
            return {**schema, "type": simple[0]}
        return None
    present = [k for k in COMBINATORS if k in schema]
    if present not in (["anyOf"], ["oneOf"]) or declared is not None or any(k in schema for k in REF_KEYWORDS):
        return None
    branches = schema[present[0]]
    if not (isinstance(branches, list) and len(branches) == 2 and all(isinstance(b, dict) for b in branches)):
        return None
    nulls = [b for b in branches if b.get("type") == "null" and b.keys() <= _NULL_ANNOTATIONS]
    others = [b for b in branches if b not in nulls]
    if len(nulls) != 1 or len(others) != 1:
        return None
    branch = others[0]
    kind = branch.get("type")
    if isinstance(kind, list) and len(kind) == 1:
        kind = kind[0]
    if kind not in _SIMPLE_TYPES or any(k in branch for k in (*REF_KEYWORDS, *COMBINATORS)):
        return None
    outer = {k: v for k, v in schema.items() if k != present[0]}
    return {**branch, **outer, "type": kind}


def property_kind(schema: Any) -> tuple[str | None, str]:
    """(flag type, "") for a property schema whose local references are followed (``resolve_schema``), else
    (None, why only --body can set it). One declared type T is a T flag (combinators beside it only narrow T);
    anything else a value can be — unions, ``anyOf``/``oneOf``, ``not``, no type, ``{}``/``true`` — is a
    JSON-value flag: JSON text names its own type, so nothing is guessed (docs/contract.md §6)."""
    if schema is False:
        return None, "its schema is false: no value is valid"
    if not isinstance(schema, dict):
        return "json", ""
    declared = schema.get("type")
    if isinstance(declared, list) and len(declared) == 1:
        declared = declared[0]
    if isinstance(declared, str) and declared in FLAG_TYPE_SET:
        return declared, ""
    return "json", ""


# -- 8.2 local references: one resolver for flags and help examples (resolve_schema) -----------------------------------
# pydantic (FastMCP, the SDK's MCPServer) writes every model and Enum parameter as {"$ref": "#/$defs/Tank"}: a
# flag is typed as if the referenced schema were written inline. A reference that leaves the document or leads
# back to itself before reaching a type has no type a flag could take.

REF_DEPTH_LIMIT = 32  # references and single-schema allOf wrappers followed for one property
_ANNOTATION_KEYWORDS = frozenset(
    ("title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "$comment")
)


def _ref_pointer(ref: str) -> list[str] | None:
    """The JSON-pointer tokens of a same-document ``$ref`` (``#``, ``#/$defs/Tank``, percent-encoding and ``~0``
    ``~1`` escapes undone), None for anything else (another document, a plain-name fragment such as ``#tank``)."""
    if not ref.startswith("#"):
        return None
    fragment = ref[1:]
    if "%" in fragment:
        from urllib.parse import unquote

        fragment = unquote(fragment)
    if not fragment:
        return []
    if not fragment.startswith("/"):
        return None
    return [part.replace("~1", "/").replace("~0", "~") for part in fragment[1:].split("/")]


INLINED_KEYWORDS = frozenset((*REF_KEYWORDS, *COMBINATORS))


# A reference may be used many times (``{"anyOf": [{"$ref": "#/$defs/L4"}, …×30]}``, five levels: 30^5 branches
# from a 4 KB schema), so written out inline a schema can grow as width^depth. ``SchemaWork`` bounds one operation:
# a node's result is shared by every place that asks for it again (the same node at the same depth, reached by a
# chain holding none of the references it followed), the schemas a property writes out are counted with the shared
# parts counted in full, the steps taken across the operation are counted too, and its deadline is checked at each
# step. Past either count a property is "too large to
# type": --body only (docs/contract.md §6), and no model family gets the tool (§11.2).
RESOLVE_NODE_LIMIT = 2000  # schemas one property written out inline may hold (shared subtrees counted in full)
RESOLVE_STEP_LIMIT = 20000  # references and combinators followed for one operation (a tool's flags, its shapes)


class SchemaWork:
    """One operation's budget for ``resolve_schema`` (see above): shared results, counted schemas and steps, the
    operation's ``deadline`` (``mcp_timeout`` once spent). ``too_large`` keeps the first "too large" reason."""

    def __init__(self, deadline: Deadline | None = None) -> None:
        self.deadline = deadline
        self.steps = 0
        self.too_large = ""
        # (id of the node, chain, depth) or (id, depth) -> (the node, its result, why, size, references followed)
        self.done: dict[tuple[int, tuple[str, ...], int], tuple[Any, ...]] = {}
        self.shared: dict[tuple[int, int], tuple[Any, ...]] = {}

    def exceeded(self, what: str) -> tuple[Any, str, int, frozenset[str]]:
        why = f"its schema is too large to type ({what})"
        self.too_large = self.too_large or why
        return None, why, 0, frozenset()


def resolve_schema(
    schema: Any, root: Any, chain: tuple[str, ...] = (), depth: int = 0, *, work: SchemaWork | None = None
) -> tuple[Any, str]:
    """``schema`` as if its local references were written inline: ``$ref`` (its sibling keywords kept beside the
    target, e.g. a description), single-schema ``allOf`` wrappers, and the same in each ``anyOf``/``oneOf``
    branch. Returns (schema, "") or (None, why it cannot be followed: remote, recursive, dangling, too large to
    type). Bounded by ``REF_DEPTH_LIMIT`` and by ``work`` (one operation's ``SchemaWork``; a fresh one when
    None): at most ``RESOLVE_NODE_LIMIT`` schemas written out, parts used again shared, not copied. ``root`` is the
    inputSchema the pointers start from; ``chain`` the references followed to get here, ``depth`` how many steps."""
    if not isinstance(schema, dict) or schema.keys().isdisjoint(INLINED_KEYWORDS):
        return schema, ""
    resolved, why, _size, _refs = _resolve_counted(schema, root, chain, depth, work or SchemaWork())
    return resolved, why


_NO_REFS: frozenset[str] = frozenset()


def _resolve_counted(
    schema: Any, root: Any, chain: tuple[str, ...], depth: int, work: SchemaWork
) -> tuple[Any, str, int, frozenset[str]]:
    """``resolve_schema``'s step: (schema, why, how many schemas it holds written out, the references it followed),
    kept in ``work``. A result is the same whatever the chain that led to it unless the chain holds one of the
    references it followed (then that one is recursive), so a success is shared by every chain that holds none of
    them (``work.shared``); anything else is kept for its own chain (``work.done``)."""
    if not isinstance(schema, dict) or schema.keys().isdisjoint(INLINED_KEYWORDS):
        return schema, "", 1, _NO_REFS
    key = (id(schema), chain, depth)
    kept = work.done.get(key)
    if kept is not None and kept[0] is schema:  # the node itself is kept too: its id cannot be reused meanwhile
        return kept[1:]
    shared = work.shared.get((id(schema), depth))
    if shared is not None and shared[0] is schema and shared[4].isdisjoint(chain):
        return shared[1:]
    work.steps += 1
    if work.steps > RESOLVE_STEP_LIMIT:
        found = work.exceeded(f"more than {RESOLVE_STEP_LIMIT} $ref and anyOf steps to follow")
    else:
        if work.deadline is not None:
            work.deadline.remaining()
        found = _resolve_step(schema, root, chain, depth, work)
        if not found[1] and found[2] > RESOLVE_NODE_LIMIT:
            found = work.exceeded(f"its local $refs written out inline make more than {RESOLVE_NODE_LIMIT} schemas")
    work.done[key] = (schema, *found)
    if not found[1]:
        work.shared[(id(schema), depth)] = (schema, *found)
    return found


def _resolve_step(
    schema: dict[str, Any], root: Any, chain: tuple[str, ...], depth: int, work: SchemaWork
) -> tuple[Any, str, int, frozenset[str]]:
    if depth > REF_DEPTH_LIMIT:
        return None, f"its $ref chain is longer than {REF_DEPTH_LIMIT} steps", 0, _NO_REFS
    for keyword in ("$dynamicRef", "$recursiveRef"):
        if keyword in schema:
            why = f"its schema is a dynamic reference ({keyword}: {short_text(schema[keyword])}), not followed"
            return None, why, 0, _NO_REFS
    if "$ref" in schema:
        ref = schema["$ref"]
        if not isinstance(ref, str):
            return None, f"its $ref is not a string ({short_text(ref)})", 0, _NO_REFS
        pointer = _ref_pointer(ref)
        if pointer is None or ("$id" in schema and schema is not root):
            where = "a nested $id makes it another document" if pointer is not None else short_text(ref, 60)
            if pointer is None and ref.startswith("#"):
                return None, f"its $ref {short_text(ref, 60)} is not a JSON pointer into the inputSchema", 0, _NO_REFS
            return None, f"remote $ref ({where}): not fetched", 0, _NO_REFS
        if ref in chain:
            return (
                None,
                f"recursive $ref ({short_text(ref, 60)} leads back to itself before reaching a type)",
                0,
                _NO_REFS,
            )
        target = root
        for part in pointer:
            if isinstance(target, dict) and part in target:
                target = target[part]
            elif isinstance(target, list) and part.isdigit() and int(part) < len(target):
                target = target[int(part)]
            else:
                return None, f"its $ref {short_text(ref, 60)} points to nothing in the inputSchema", 0, _NO_REFS
        target, why, size, refs = _resolve_counted(target, root, (*chain, ref), depth + 1, work)
        if why:
            return None, why, 0, _NO_REFS
        return _beside(target, {k: v for k, v in schema.items() if k != "$ref"}), "", size, refs | {ref}
    wrapped = schema.get("allOf")
    if isinstance(wrapped, list) and len(wrapped) == 1:  # older pydantic: {"allOf": [{"$ref": ...}], ...}
        inner, why, size, refs = _resolve_counted(wrapped[0], root, chain, depth + 1, work)
        if why:
            return None, why, 0, _NO_REFS
        return _beside(inner, {k: v for k, v in schema.items() if k != "allOf"}), "", size, refs
    size, followed = 1, set[str]()
    for keyword in ("anyOf", "oneOf"):
        branches = schema.get(keyword)
        if isinstance(branches, list) and any(isinstance(b, dict) and ("$ref" in b or "allOf" in b) for b in branches):
            resolved = []
            for branch in branches:
                inner, why, count, refs = _resolve_counted(branch, root, chain, depth + 1, work)
                if why:
                    return None, why, 0, _NO_REFS
                resolved.append(inner)
                size += count
                followed |= refs
                if size > RESOLVE_NODE_LIMIT:
                    return work.exceeded(
                        f"its local $refs written out inline make more than {RESOLVE_NODE_LIMIT} schemas"
                    )
            schema = {**schema, keyword: resolved}
        elif isinstance(branches, list):
            size += len(branches)
    return schema, "", size, frozenset(followed)


def _beside(target: Any, outer: dict[str, Any]) -> Any:
    """``target`` with ``outer``'s keywords applied beside it (a ``$ref``'s siblings, an ``allOf`` wrapper's own
    keywords): merged when they agree, else both kept under ``allOf`` (then a JSON-value flag, which the full
    validation checks), annotations such as the description on top either way."""
    if not outer:
        return target
    if target is True or target == {}:
        return outer
    if isinstance(target, dict) and (
        outer.keys() <= _ANNOTATION_KEYWORDS
        or all(k in _ANNOTATION_KEYWORDS or k not in target or target[k] == v for k, v in outer.items())
    ):
        return {**target, **outer}
    notes = {k: v for k, v in outer.items() if k in _ANNOTATION_KEYWORDS}
    rules = {k: v for k, v in outer.items() if k not in _ANNOTATION_KEYWORDS}
    return {**notes, "allOf": [target, rules] if rules else [target]}


def json_member_types(schema: Any, depth: int = 0, *, unions: bool = True) -> list[str]:
    """The JSON types a (resolved) schema admits, in its own order: ``type``, the branches of ``anyOf``/``oneOf``
    (not with ``unions=False``: what the schema itself names), the values of ``enum``/``const``; [] when it does
    not say (any JSON value)."""
    if not isinstance(schema, dict) or depth > 8:
        return []
    declared = schema.get("type")
    if isinstance(declared, str):
        return [declared]
    if isinstance(declared, list):
        return list(dict.fromkeys(t for t in declared if isinstance(t, str)))
    for keyword in ("anyOf", "oneOf") if unions else ():
        branches = schema.get(keyword)
        if isinstance(branches, list) and branches:
            found: list[str] = []
            for branch in branches:
                types = json_member_types(branch, depth + 1)
                if not types:
                    return []
                found += types
            return list(dict.fromkeys(found))
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return list(dict.fromkeys(json_type(v, integers=True) for v in enum))
    if "const" in schema:
        return [json_type(schema["const"], integers=True)]
    return []


# -- 8.3 flags: a schema -> typed flags (build_tool_flags); --tools --brief (describe_brief) ---------------------------

_JSON_SAMPLES = {
    "boolean": "true",
    "integer": "1",
    "number": "1.5",
    "array": "'[1,2]'",
    "object": '\'{"key":"value"}\'',
    "null": "null",
    "string": "'\"text\"'",
}


_ARRAY_EXAMPLES = {
    "string": """'["a","b"]'""",
    "integer": "'[1,2,3]'",
    "number": "'[1.5,2]'",
    "boolean": "'[true,false]'",
    "object": """'[{"key":"value"}]'""",
    "array": "'[[1,2],[3]]'",
}


def array_flag_example(schema: Mapping[str, Any]) -> str:
    """An array flag's example in the type of its items (a string array shows strings, never numbers)."""
    items = schema.get("items")
    declared = items.get("type") if isinstance(items, dict) else None
    return _ARRAY_EXAMPLES.get(declared, _ARRAY_EXAMPLES["string"]) if isinstance(declared, str) else "'[\"a\",1]'"


def json_flag_examples(flag: ToolFlag) -> list[str]:
    """Worked examples of a JSON-value flag: its first non-string member, then a string written as JSON."""
    types = [t for t in json_member_types(flag.schema) if t in _JSON_SAMPLES]  # a made-up type shows as any
    shown = [t for t in types if t != "string"][:1] or ([] if types else ["object"])
    if "string" in types or not types:
        shown.append("string")
    return [f"{flag.option} {_JSON_SAMPLES[t]}" for t in shown]


def types_words(types: Sequence[str]) -> str:
    return " or ".join(types) if types else "any JSON value"


def build_tool_flags(tool: Mapping[str, Any]) -> ToolFlags:
    """Map ``inputSchema.properties`` to typed flags (docs/contract.md §6). Never raises on odd schemas.

    Local ``$ref``s are followed first (``resolve_schema``, one ``SchemaWork`` for the tool). A property whose name
    cannot be a flag (empty, leading '-', '=', whitespace/control characters, reserved option name) or whose
    reference cannot be followed (remote, recursive, dangling, too large to type) goes to ``body_only`` with the
    reason; the other properties still get their flags.
    """
    notes: list[str] = []
    schema = schema_object(tool)
    if schema is None:
        notes.append("the tool has no inputSchema object; only --body can pass arguments")
        return ToolFlags({}, {}, (), tuple(notes))
    raw_required = schema.get("required")
    required: list[str] = []
    if type(raw_required) is list and raw_required:
        required = list(dict.fromkeys(r for r in raw_required if isinstance(r, str)))
    elif raw_required is not None and not isinstance(raw_required, list):
        notes.append("inputSchema.required is not a list and was ignored")
    properties = schema.get("properties")
    if properties is None:
        properties = {}
    elif not isinstance(properties, dict):
        notes.append("inputSchema.properties is not an object; only --body can pass arguments")
        properties = {}
    flags: dict[str, ToolFlag] = {}
    body_only: dict[str, BodyOnlyField] = {}
    required_set = set(required)
    work = SchemaWork()
    for name, prop in properties.items():
        is_required = name in required_set
        if type(prop) is dict and FAST_FLAG_NAME.fullmatch(name) and name not in RESERVED_OPTION_NAMES:
            declared = prop.get("type")  # fast path for the common plain property; same rules as below
            if type(declared) is str and declared in FLAG_TYPE_SET and prop.keys().isdisjoint(HARD_KEYWORDS):
                flags[name] = ToolFlag(name, declared, is_required, prop)
                continue
        problem = flag_name_problem(name)
        resolved, problem = (None, problem) if problem else resolve_schema(prop, schema, work=work)
        if problem:
            body_only[name] = BodyOnlyField(name, problem, is_required, prop)
            continue
        nullable = nullable_simple(resolved) if type(resolved) is dict else None
        if nullable is not None:
            flags[name] = ToolFlag(name, nullable["type"], is_required, nullable, nullable=True)
            continue
        kind, reason = property_kind(resolved)
        if kind is None:
            body_only[name] = BodyOnlyField(name, reason, is_required, prop)
        else:
            flags[name] = ToolFlag(name, kind, is_required, resolved if isinstance(resolved, dict) else {})
    for name in required:
        if name not in properties:
            body_only[name] = BodyOnlyField(name, "it is required but has no schema in properties", True)
    return ToolFlags(flags, body_only, tuple(required), tuple(notes))


BRIEF_SUMMARY_LIMIT = 120  # characters of a tool's first description line in --tools --brief


BRIEF_ENUM_LIMIT = 5  # enum values a --tools --brief signature lists before "|…"


def _brief_usage(flag: ToolFlag) -> str:
    """A flag in a ``--tools --brief`` signature: as tool help writes it, with a string or number enum's values in
    place of the type (``--level error|warning|info``), as tool help lists them."""
    enum = flag.schema.get("enum")
    if flag.kind in ("string", "integer", "number") and isinstance(enum, list) and enum:
        shown = [v if isinstance(v, str) else dump_json(v) for v in enum[:BRIEF_ENUM_LIMIT]]
        if all(v and v.isprintable() and " " not in v and "|" not in v for v in shown):
            more = "|…" if len(enum) > BRIEF_ENUM_LIMIT else ""
            return f"--{flag.name} {'|'.join(shown)}{more}"
    return flag.usage


def render_brief_lines(tools: Sequence[Mapping[str, Any]]) -> str:
    """``--tools --brief --raw``: one line a person reads per tool (``describe_brief``'s fields): its name, its flag
    signature, the fields only ``--body`` sets, and its summary after ``—``."""
    lines = []
    for brief in tools:
        words = [str(brief["name"]), brief["usage"]]
        if brief.get("body_only"):
            words.append(f"--body {{{', '.join(brief['body_only'])}}}")
        if brief.get("task_support"):
            words.append("(task-only)")
        summary = f"  — {brief['summary']}" if brief["summary"] else ""
        lines.append(printable(" ".join(w for w in words if w) + summary) + "\n")
    return "".join(lines)


def describe_brief(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One tool for ``--tools --brief`` (contract §7): name, the first description line (cut to
    ``BRIEF_SUMMARY_LIMIT``) and the flag signature, required flags first and optional ones in brackets. Fields
    that only ``--body`` can set are named in ``body_only`` (optional ones in brackets); a task-only tool says so."""
    mapped = build_tool_flags(tool)
    description = tool.get("description")
    lines = description.strip().splitlines() if isinstance(description, str) else []
    summary = lines[0].strip() if lines else ""
    if len(summary) > BRIEF_SUMMARY_LIMIT:
        summary = summary[: BRIEF_SUMMARY_LIMIT - 1].rstrip() + "…"
    flags = sorted(mapped.flags.values(), key=lambda f: not f.required)  # stable: schema order within each group
    usage = " ".join(_brief_usage(f) if f.required else f"[{_brief_usage(f)}]" for f in flags)
    out: dict[str, Any] = {"name": tool.get("name"), "summary": summary, "usage": usage}
    if mapped.body_only:
        body = sorted(mapped.body_only.values(), key=lambda b: not b.required)
        out["body_only"] = [b.name if b.required else f"[{b.name}]" for b in body]
    if tool_task_support(tool) == "required":
        out["task_support"] = "required"
    return out


def describe_cli(tool: Mapping[str, Any]) -> dict[str, Any]:
    """Per-tool CLI summary for ``--tools`` (``data.cli[tool_name]``): flags and fields that need --body. A
    JSON-value flag (``"type": "json"``) lists the JSON types its schema admits (``"types"``, [] for any)."""
    mapped = build_tool_flags(tool)
    out: dict[str, Any] = {
        "flags": [
            {"name": f.name, "flag": f.usage, "type": f.kind, "required": f.required}
            | ({"nullable": True} if f.nullable else {})
            | ({"types": json_member_types(f.schema)} if f.kind == "json" else {})
            for f in mapped.flags.values()
        ],
        "body_only": [{"name": b.name, "reason": b.reason} for b in mapped.body_only.values()],
    }
    if mapped.notes:
        out["notes"] = list(mapped.notes)
    if tool_task_support(tool) == "required":  # beside the flags: the call itself is refused (contract §5)
        out["task_support"] = "required"
        out["notes"] = [*out.get("notes", []), TASK_ONLY_NOTE]
    return out


# -- 8.4 values: a flag's text -> its JSON value, positional-argument errors -------------------------------------------


def tool_command(server_name: str, tool_name: Any, config: str | None = None) -> str:
    """``bkmcp [--config PATH] <server> <tool>`` as a user can paste it: shell-quoted when needed, control characters
    escaped (``build_server_command``)."""
    return printable(" ".join(tool_words(server_name, tool_name, config)))


def tool_words(server_name: str, tool_name: Any, config: str | None = None) -> list[str]:
    """``tool_command``'s shell words, for help lines that wrap between words."""
    given = ["--config", shell_quote(config)] if config is not None else []
    return ["bkmcp", *given, shell_quote(server_name), shell_quote(str(tool_name))]


def json_path(parts: Iterable[Any]) -> str:
    """``$.a.b[0]["odd key"]``: the JSON path of a location in the arguments object."""
    out = "$"
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        elif isinstance(part, str) and IDENTIFIER.fullmatch(part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(str(part), ensure_ascii=False)}]"
    return out


def convert_flag_value(flag: ToolFlag, token: ToolToken) -> Any:
    """The JSON value of one flag token; ``ValueError`` with a user-facing reason when it is malformed."""
    value = token.value
    if flag.kind == "boolean":
        if value is None:
            raise ValueError(f"{flag.option} needs a value: write {flag.option}=true or {flag.option}=false")
        if not token.has_equals:
            raise ValueError(
                f"boolean {flag.option} takes its value after '=': write {flag.option}=true or {flag.option}=false "
                f"(not '{flag.option} {short_text(value)}')"
            )
        if value == "true":
            return True
        if value == "false":
            return False
        raise ValueError(f"{flag.option} must be {flag.option}=true or {flag.option}=false, got {short_text(value)!r}")
    if value is None:
        raise ValueError(f"{flag.option} needs a value ({flag.usage})")
    if flag.kind == "string":
        return value
    if flag.kind == "integer":
        if not JSON_INTEGER.fullmatch(value):
            raise ValueError(
                f"{flag.option} expects an integer (digits with an optional leading '-', e.g. 20), got "
                f"{short_text(value)!r}"
            )
        return _exact_number(value)
    if flag.kind == "number":
        if not JSON_NUMBER.fullmatch(value):
            raise ValueError(f"{flag.option} expects a JSON number (e.g. 0.5, -2, 1e-3), got {short_text(value)!r}")
        return _exact_number(value)
    if flag.kind == "json":
        try:
            return parse_json(value)
        except JsonInputError as exc:
            types = types_words(json_member_types(flag.schema))
            raise ValueError(
                f"{flag.option} takes a JSON value ({types}): write a JSON value, e.g. "
                f"{' or '.join(json_flag_examples(flag))} (a string goes in JSON quotes); {exc}"
            ) from None
    try:
        parsed = parse_json(value)
    except JsonInputError as exc:
        example = array_flag_example(flag.schema) if flag.kind == "array" else '\'{"key":"value"}\''
        extra = " (arrays are JSON, never comma-separated)" if flag.kind == "array" else ""
        raise ValueError(
            f"{flag.option} takes a JSON {flag.kind}{extra}, e.g. {flag.option} {example}: {exc}"
        ) from None
    expected = list if flag.kind == "array" else dict
    if not isinstance(parsed, expected):
        raise ValueError(f"{flag.option} takes a JSON {flag.kind}, got {json_type(parsed, integers=True)}")
    return parsed


def _exact_number(text: str) -> Any:
    """Integers stay ``int`` (huge ones and -0 keep their text); everything else keeps its exact text."""
    if JSON_INTEGER.fullmatch(text) and text != "-0":
        return parse_int(text)
    return JsonNumber(text)


def is_json_number(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, (int, float)):
        return True
    if "_decimal" not in sys.modules and "_pydecimal" not in sys.modules:
        return False  # no Decimal exists before the module defining it is loaded: a string never loads it
    return isinstance(value, decimal.Decimal) and value.is_finite()


def _read_tokens(
    tool: Mapping[str, Any], mapped: ToolFlags, tokens: Sequence[ToolToken]
) -> tuple[dict[str, Any], list[dict[str, str]]]:
    """Convert tokens to values; collect every problem instead of stopping at the first."""
    values: dict[str, Any] = {}
    problems: list[dict[str, str]] = []
    seen: set[str] = set()
    for token in tokens:
        option = short_text(f"--{token.name}", 60)
        repeated, flag, body_field = token.name in seen, mapped.flags.get(token.name), mapped.body_only.get(token.name)
        seen.add(token.name)
        if repeated:
            message = f"{option} is given more than once (give each flag once; arrays are JSON)"
        elif flag is not None:
            try:
                values[token.name] = convert_flag_value(flag, token)
                continue
            except ValueError as exc:
                message = str(exc)
        elif body_field is not None:
            message = f"{printable(token.name)!r} has no flag: {body_field.reason}; set it with --body"
        else:
            close = closest_names(token.name, [*mapped.flags, *mapped.body_only])
            shown = [
                f"--{c}" if c in mapped.flags else f"{short_text(c)!r} (no flag: set it with --body)" for c in close
            ]
            suggestion = f"; did you mean {', '.join(shown)}?" if close else ""
            problems.append(
                {"flag": option, "message": f"unknown option {option} for tool {tool.get('name')!r}{suggestion}"}
            )
            continue
        problems.append({"flag": option, "path": json_path([token.name]), "message": message})
    return values, problems


def _raise_token_problems(
    tool: Mapping[str, Any], problems: list[dict[str, str]], server_name: str, config: str | None
) -> None:
    if not problems:
        return
    first = problems[0]["message"]
    more = f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else ""
    raise InvalidArgumentsError(
        f"{first}{more}",
        hint=f"see the tool's flags with: {tool_command(server_name, tool.get('name'), config)} --help",
        details={"problems": problems},
    )


def _prompt_arguments(prompt: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """A prompt's declared arguments by name (the ones that are objects)."""
    declared = prompt.get("arguments")
    return {str(a.get("name")): a for a in declared if isinstance(a, dict)} if isinstance(declared, list) else {}


def parse_prompt_arguments(
    prompt: Mapping[str, Any], tokens: Sequence[ToolToken], *, server_name: str = "<server>"
) -> dict[str, str]:
    """``--ARG VALUE`` after ``--prompt NAME`` -> ``prompts/get``'s arguments, each a string (docs/contract.md §2).
    An unknown, repeated or valueless flag and a required argument not given are ``invalid_mcp_arguments``, every
    problem at once, before anything is sent; an argument named like a reserved option (contract §6) has no flag."""
    names = _prompt_arguments(prompt)
    values: dict[str, str] = {}
    problems: list[dict[str, str]] = []
    for token in tokens:
        flag = printable(f"--{token.name}")
        if token.name not in names or token.name in RESERVED_OPTION_NAMES:
            problems.append({"flag": flag, "message": f"prompt {prompt.get('name')!r} has no argument {flag}"})
        elif token.name in values:
            problems.append({"flag": flag, "message": f"{flag} given more than once"})
        elif token.value is None:
            problems.append({"flag": flag, "message": f"{flag} needs a value (write {flag}=VALUE)"})
        else:
            values[token.name] = token.value
    hint = f"see its arguments with: bkmcp {server_name} --prompt {prompt.get('name')} --help"
    return check_prompt_arguments(prompt, values, problems, reserved=RESERVED_OPTION_NAMES, hint=hint)


def check_prompt_arguments(
    prompt: Mapping[str, Any],
    values: Mapping[str, str],
    problems: Sequence[dict[str, str]] = (),
    *,
    reserved: Iterable[str] = (),
    hint: str | None = None,
) -> dict[str, str]:
    """A prompt's arguments checked against its declaration before ``prompts/get`` (the CLI's flags, the resident's
    ``arguments`` object): a name it does not declare and a required argument not given are
    ``invalid_mcp_arguments``, every problem at once (after ``problems`` already found); ``reserved`` names have no
    flag (contract §6), which a missing one's message says."""
    names = _prompt_arguments(prompt)
    found = list(problems)
    for name in values:
        if name not in names:
            found.append(
                {"path": json_path([name]), "message": f"prompt {prompt.get('name')!r} has no argument {name!r}"}
            )
    for name, argument in names.items():
        if argument.get("required") is True and name not in values:
            why = " (its name is a bkmcp option, so it has no flag)" if name in reserved else ""
            found.append({"path": json_path([name]), "message": f"required argument {name!r} is missing{why}"})
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise InvalidArgumentsError(found[0]["message"] + more, hint=hint, details={"problems": found})
    return dict(values)


def parse_tool_arguments(
    tool: Mapping[str, Any], tokens: Sequence[ToolToken], *, server_name: str = "<server>", config: str | None = None
) -> dict[str, Any]:
    """Named flags -> the ``arguments`` object (P01, P02, P03). Only given flags are sent; no defaults.

    Every malformed, repeated, unknown or body-only flag and every required flag not given is reported at once as
    ``invalid_mcp_arguments`` whose ``problems`` name the flag, and the hint names the tool help command; so is a
    required field that has no flag (with the way to send it: ``--body``).
    """
    mapped = build_tool_flags(tool)
    values, problems = _read_tokens(tool, mapped, tokens)
    command = tool_command(server_name, tool.get("name"), config)
    for field_ in mapped.body_only.values():
        if field_.required:  # flags alone can never satisfy it: say how it can be sent
            problems.append(
                {
                    "path": json_path([field_.name]),
                    "message": f"required field {printable(field_.name)!r} has no flag ({field_.reason}); send "
                    f"the arguments with --body: {command} --body '{{...}}'",
                }
            )
    for flag in mapped.flags.values():  # a required flag not given: named like the other flag errors (issue 40)
        if flag.required and flag.name not in values and all(p.get("flag") != flag.option for p in problems):
            problem = f"missing required flag {printable(flag.usage)}"
            problems.append({"flag": flag.option, "path": json_path([flag.name]), "message": problem})
    _raise_token_problems(tool, problems, server_name, config)
    return values


def build_positional_error(
    tool: Mapping[str, Any],
    value: str,
    follows: str | None = None,
    *,
    server_name: str = "<server>",
    config: str | None = None,
) -> UsageError:
    """A bare value after the tool name (``bkmcp fs list_directory ./notes``): tool arguments are flags, so the
    error names this tool's flags, and the one to write when exactly one required flag takes a string. ``follows``:
    the flag whose value came just before (``--text hello world``: the value's unquoted rest, most likely)."""
    import shlex

    flags = list(build_tool_flags(tool).flags.values())
    command = tool_command(server_name, tool.get("name"), config)
    shown = printable(repr(value))
    if not flags:
        return UsageError(
            f"unexpected argument {shown}: tool {printable(str(tool.get('name')))!r} has no flags",
            hint=f"pass its arguments as one JSON object: {command} --body '{{...}}'",
        )
    listed = [f"{flag.usage}{' (required)' if flag.required else ''}" for flag in flags[:_POSITIONAL_FLAGS_SHOWN]]
    more = f", … ({len(flags) - _POSITIONAL_FLAGS_SHOWN} more)" if len(flags) > _POSITIONAL_FLAGS_SHOWN else ""
    required = [flag for flag in flags if flag.required]
    if follows is not None:
        hint = f"quote a value that contains spaces (--{printable(follows)} 'two words'); every flag: {command} --help"
    elif len(required) == 1 and required[0].kind == "string":
        hint = f"write {printable(required[0].option + ' ' + shlex.quote(value))}; every flag: {command} --help"
    else:
        hint = f"every flag with its meaning: {command} --help"
    return UsageError(
        f"unexpected argument {shown}: tool arguments are flags (--name VALUE); this tool's: {', '.join(listed)}{more}",
        hint=hint,
    )


_POSITIONAL_FLAGS_SHOWN = 8  # flags a positional-argument error lists before "… (N more)"


def check_tool_tokens(
    tool: Mapping[str, Any], tokens: Sequence[ToolToken], *, server_name: str = "<server>", config: str | None = None
) -> list[str]:
    """With ``--body`` (P05): tool flags are not merged or sent, but must be well-formed flags of the tool.

    Returns the ignored flags (``--name``), for a warning; raises like ``parse_tool_arguments`` otherwise.
    """
    _values, problems = _read_tokens(tool, build_tool_flags(tool), tokens)
    _raise_token_problems(tool, problems, server_name, config)
    return [f"--{t.name}" for t in tokens]


# -- 8.5 validation: jsonschema run locally and bounded (patterns, sizes, depth, the deadline) -------------------------


@dataclass(frozen=True)
class ArgumentCheck:
    """What ``validate_arguments`` actually checked: ``"full"`` (whole schema) or ``"basic"`` (top level)."""

    scope: str
    notes: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.scope == "full":
            if self.notes:
                return (
                    f"arguments validated locally against the full inputSchema, except: {'; '.join(self.notes)}"
                    "; the server validates those"
                )
            return "arguments validated locally against the full inputSchema"
        why = "; ".join(self.notes) or "no full schema check"
        return f"arguments checked locally for required fields, types and enum only ({why}); the server validates"


class NotLocal(Exception):
    """The full schema cannot be checked here (remote reference, unsupported feature): fall back, say so."""


def _json_equal(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if is_json_number(a) and is_json_number(b):
        try:
            return decimal.Decimal(str(a) if isinstance(a, float) else a) == decimal.Decimal(
                str(b) if isinstance(b, float) else b
            )
        except (decimal.DecimalException, ValueError):
            return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, str) or isinstance(b, str):
        return isinstance(a, str) and isinstance(b, str) and a == b
    return a is None and b is None


TYPE_TESTS: dict[str, Callable[[Any], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": is_json_integer,
    "number": is_json_number,
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def basic_problems(schema: dict[str, Any], arguments: Mapping[str, Any]) -> list[dict[str, str]]:
    """Required, declared type and enum/const of top-level properties: needs no library, always runs."""
    problems: list[dict[str, str]] = []
    required = schema.get("required")
    if isinstance(required, list):
        for name in dict.fromkeys(r for r in required if isinstance(r, str)):
            if name not in arguments:
                problems.append({"path": json_path([name]), "message": "required property is missing"})
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return problems
    for name, value in arguments.items():
        prop = properties.get(name)
        if not isinstance(prop, dict):
            continue
        path = json_path([name])
        declared = prop.get("type")
        types = [declared] if isinstance(declared, str) else declared if isinstance(declared, list) else []
        known = [t for t in types if isinstance(t, str) and t in TYPE_TESTS]
        if known and len(known) == len(types) and not any(TYPE_TESTS[t](value) for t in known):
            got = json_type(value, integers=True)
            problems.append({"path": path, "message": f"expected {' or '.join(known)}, got {got}"})
            continue
        enum = prop.get("enum")
        if isinstance(enum, list) and not any(_json_equal(value, e) for e in enum):
            problems.append({"path": path, "message": f"must be one of {short_text(enum, 200)}"})
        if "const" in prop and not _json_equal(value, prop["const"]):
            problems.append({"path": path, "message": f"must be {short_text(prop['const'], 200)}"})
    return problems


# Where a schema holds schemas: the values of these keywords are maps of names to schemas, and those of the data
# keywords are JSON values (a "$schema" or "$ref" key there is data, not a keyword).
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_DATA = ("enum", "const", "default", "examples", "title", "description")


def unbounded_schema(schema: dict[str, Any], limit: int) -> str | None:
    """Why jsonschema could not check ``schema`` within bkmcp's bounds, or None: more than ``limit`` objects and
    arrays (counting stops there, so a huge schema costs no more), or a subschema with its own ``$schema``
    (jsonschema validates that part with its registered class: no deadline, no pattern limits)."""
    pending: list[tuple[Any, str]] = [(schema, "schema")]  # (node, "schema" | "map" | "data")
    count = 0
    while pending:
        node, role = pending.pop()
        count += 1
        if count > limit:
            return f"the inputSchema is too large to check locally (over {limit} objects and arrays)"
        if isinstance(node, dict):
            if role == "schema" and node is not schema and isinstance(node.get("$schema"), str):
                return "a subschema declares its own $schema"  # the root's own dialect is fine
            for key, value in node.items():
                if isinstance(value, (dict, list)) and role == "schema":
                    pending.append((value, "map" if key in _SCHEMA_MAPS else "data" if key in _SCHEMA_DATA else role))
                elif isinstance(value, (dict, list)):
                    pending.append((value, "schema" if role == "map" else "data"))
        else:
            pending.extend((value, role) for value in node if isinstance(value, (dict, list)))
    return None


def non_local_refs(schema: Any, found: list[str]) -> None:
    """The references of ``schema`` that leave the document, in document order, into ``found`` (a few at most); a
    walk with its own stack: any depth."""
    stack: list[Iterator[tuple[Any, Any]]] = [iter([(None, schema)])]
    while stack and len(found) <= 5:
        pair = next(stack[-1], None)
        if pair is None:
            stack.pop()
            continue
        key, value = pair
        if key in REF_KEYWORDS and isinstance(value, str):
            if not value.startswith("#"):
                found.append(value)
        elif key in _SCHEMA_MAPS:
            if isinstance(value, dict):
                stack.append((None, sub) for sub in value.values())
        elif key in _SCHEMA_DATA:
            continue  # data, not schemas
        elif isinstance(value, dict):
            stack.append(iter(value.items()))
        elif isinstance(value, list):
            stack.append((None, item) for item in value)


# Limits on what local validation attempts (docs/arguments.md): a server's schema must never hang bkmcp. Python's
# re cannot be interrupted, so a pattern runs only when its worst case is small: no backreference, no quantified
# group that holds a quantifier or an alternation (``(a+)+``, ``(a|ab)*``: exponential backtracking), and a string
# short enough for its number k of open-ended quantifiers (polynomial backtracking, about len**k steps, one more
# factor when the pattern is not anchored with ^).
REGEX_WORK_LIMIT = 10**8  # ~0.1 s of the re engine in the worst case
REGEX_TEXT_LIMIT = 1_000_000  # characters any pattern is run on locally
UNIQUE_ITEMS_LIMIT = 2000  # uniqueItems over containers is quadratic in jsonschema: longer arrays go to the server
# jsonschema's cost grows with the schema (its meta-schema pass, ~0.2 ms per object or array of the schema, more
# than the validation itself): a larger inputSchema is checked by the basic rules only, and the answer says so.
SCHEMA_NODE_LIMIT = 5000  # objects and arrays in an inputSchema that local validation checks in full
_REGEX_SHAPES: dict[str, tuple[str | None, int, bool]] = {}


def _regex_shape(pattern: str) -> tuple[str | None, int, bool]:
    """(why the pattern may backtrack catastrophically or None, its degree k, anchored at the start), cached."""
    shape = _REGEX_SHAPES.get(pattern)
    if shape is None:
        import importlib

        try:
            sre: Any = importlib.import_module("re._parser")  # Python >= 3.11
        except ImportError:  # pragma: no cover - Python < 3.11
            sre = importlib.import_module("sre_parse")
        c = sre._constants if hasattr(sre, "_constants") else sre
        repeats = {c.MAX_REPEAT, c.MIN_REPEAT} | ({c.POSSESSIVE_REPEAT} if hasattr(c, "POSSESSIVE_REPEAT") else set())
        backrefs = {c.GROUPREF, c.GROUPREF_EXISTS} | ({c.GROUPREF_IGNORE} if hasattr(c, "GROUPREF_IGNORE") else set())

        def walk(items: Any, repeated: bool) -> int:
            """The degree of a sequence; raises ValueError naming the risk."""
            degree = 0
            for op, av in items:
                if op in backrefs:
                    raise ValueError("it uses a backreference")
                if op in repeats:
                    low, high, body = av
                    if repeated and high != low:
                        raise ValueError("it nests quantifiers")
                    inner = walk(body, repeated or high > 1)
                    degree += inner + (1 if high != low else 0)
                elif op is c.BRANCH:
                    if repeated:
                        raise ValueError("it repeats an alternation")
                    degree += max((walk(alt, repeated) for alt in av[1]), default=0)
                elif op is c.SUBPATTERN:
                    degree += walk(av[-1], repeated)
                elif op in (c.ASSERT, c.ASSERT_NOT):
                    degree += walk(av[1], repeated)
                elif hasattr(c, "ATOMIC_GROUP") and op is c.ATOMIC_GROUP:
                    degree += walk(av, repeated)
            return degree

        try:
            parsed = sre.parse(pattern)
        except Exception:  # not a Python regex: jsonschema reports it as it always did
            shape = (None, 0, False)
        else:
            first = list(parsed)[:1]
            anchored = (
                bool(first)
                and first[0][0] is c.AT
                and first[0][1] in (c.AT_BEGINNING, c.AT_BEGINNING_STRING)
                and not parsed.state.flags & c.SRE_FLAG_MULTILINE
            )
            try:
                shape = (None, walk(parsed, False), anchored)
            except ValueError as exc:
                shape = (str(exc), 0, anchored)
            except RecursionError:
                shape = ("it is nested too deeply", 0, anchored)
        _REGEX_SHAPES[pattern] = shape
    return shape


def regex_risk(pattern: str, length: int) -> str | None:
    """Why ``pattern`` is not run locally on a string of ``length`` characters (None: it is safe to run)."""
    why, degree, anchored = _regex_shape(pattern)
    if why is not None:
        return f"{why}, which can backtrack for minutes"
    if length > REGEX_TEXT_LIMIT:
        return f"the string is longer than {REGEX_TEXT_LIMIT} characters"
    work = length ** (degree + (0 if anchored else 1))
    if degree and work > REGEX_WORK_LIMIT:
        return f"a {length}-character string is too long for its {degree} open-ended quantifiers"
    return None


class ValidationBudget:
    """What a validator class of ``validator_class`` checks between keywords and what it chose not to run."""

    def __init__(self, deadline: Deadline | None) -> None:
        self.deadline = deadline
        self.skipped: list[str] = []

    def skip(self, note: str) -> None:
        if note not in self.skipped:
            self.skipped.append(note)


_VALIDATORS: dict[Any, Any] = {}  # dialect class -> (validator class, local-only resolver class), built once
_VALIDATORS_LOCK = _thread.allocate_lock()
_VALIDATION_STATE: Any = None  # a threading.local: the budget of the validation running on this thread


def _active_budget() -> ValidationBudget:
    budget = getattr(_VALIDATION_STATE, "budget", None)
    return budget if budget is not None else ValidationBudget(None)


def _guarded_validators(base: Any) -> dict[str, Any]:
    """``base``'s keyword functions, each checking the deadline first; pattern matching and uniqueItems limited.
    The budget is the running validation's (``_active_budget``), so one class serves every call and thread."""
    originals = dict(base.VALIDATORS)

    def pattern(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if isinstance(value, str) and isinstance(instance, str):
            why = regex_risk(value, len(instance))
            if why is not None:
                _active_budget().skip(f"pattern {short_text(value)} not run locally ({why})")
                return None
        return originals["pattern"](validator, value, instance, schema)

    def key_patterns(name: str) -> Callable[..., Any]:
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            patterns = schema.get("patternProperties") if isinstance(schema, dict) else None
            if isinstance(instance, dict) and instance and isinstance(patterns, dict):
                longest = max(len(k) for k in instance)
                for key_pattern in patterns:
                    why = regex_risk(key_pattern, longest) if isinstance(key_pattern, str) else None
                    if why is not None:
                        _active_budget().skip(f"{name} with pattern {short_text(key_pattern)} not run locally ({why})")
                        return None
            return originals[name](validator, value, instance, schema)

        return keyword

    def unique_items(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        if (
            value is True
            and isinstance(instance, list)
            and len(instance) > UNIQUE_ITEMS_LIMIT
            and any(isinstance(item, (dict, list)) for item in instance)
        ):
            _active_budget().skip(
                f"uniqueItems not run locally (an array of more than {UNIQUE_ITEMS_LIMIT} containers)"
            )
            return None
        return originals["uniqueItems"](validator, value, instance, schema)

    def any_of(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
        context = _failed_branches(validator, value, instance)
        if context is not None:
            yield _validation_error(f"{instance!r} is not valid under any of the given schemas", context=context)

    def one_of(validator: Any, value: Any, instance: Any, schema: Any) -> Any:  # jsonschema's, context kept short
        branches, first = enumerate(value), None
        kept: list[Any] = []
        for index, subschema in branches:
            errors = list(validator.descend(instance, subschema, schema_path=index))
            if not errors:
                first = subschema
                break
            kept += errors[: _CONTEXT_KEPT - len(kept)]
        else:
            yield _validation_error(f"{instance!r} is not valid under any of the given schemas", context=kept)
        more = [each for _, each in branches if validator.evolve(schema=each).is_valid(instance)]
        if more:
            reprs = ", ".join(repr(each) for each in [*more, first])
            yield _validation_error(f"{instance!r} is valid under each of {reprs}")

    replaced: dict[str, Callable[..., Any]] = {"pattern": pattern, "uniqueItems": unique_items}
    replaced |= {"anyOf": any_of, "oneOf": one_of}
    for name in ("patternProperties", "additionalProperties", "unevaluatedProperties"):
        replaced[name] = key_patterns(name)
    return _timed_validators({name: replaced.get(name) or function for name, function in originals.items()})


# jsonschema's anyOf and oneOf keep every failed branch's errors as the context of theirs, nested: a union of unions
# holds width^depth errors (the issue-36 fan-out schema grew ~60 MB a second until its deadline). Its messages never
# read them, so these keep the first _CONTEXT_KEPT of each (and say the same).
_CONTEXT_KEPT = 8


def _failed_branches(validator: Any, branches: Any, instance: Any, first: int = 0) -> list[Any] | None:
    """The first errors of ``branches`` when every one fails (at most ``_CONTEXT_KEPT``), None when one passes."""
    kept: list[Any] = []
    for index, subschema in enumerate(branches, first):
        errors = list(validator.descend(instance, subschema, schema_path=index))
        if not errors:
            return None
        kept += errors[: _CONTEXT_KEPT - len(kept)]
    return kept


def _validation_error(message: str, **fields: Any) -> Any:
    from jsonschema.exceptions import ValidationError

    return ValidationError(message, **fields)


def _timed_validators(keywords: dict[str, Any], deadline: Deadline | None = None) -> dict[str, Any]:
    """Keyword functions that check a deadline first (``mcp_timeout`` once the operation's budget is spent):
    ``deadline``, or without one the running validation's (``_active_budget``)."""

    def timed(function: Callable[..., Any]) -> Callable[..., Any]:
        def keyword(validator: Any, value: Any, instance: Any, schema: Any) -> Any:
            current = deadline if deadline is not None else _active_budget().deadline
            if current is not None:
                current.remaining()
            return function(validator, value, instance, schema)

        return keyword

    return {name: timed(function) for name, function in keywords.items()}


def check_schema(cls: Any, schema: Any, deadline: Deadline | None) -> None:
    """``cls.check_schema(schema)`` (the schema against its meta-schema), checking ``deadline`` between keywords
    and at each ``$ref`` (a subschema carrying ``$schema`` switches jsonschema to its registered class, which
    the timed keywords do not reach; the resolver travels along): a huge schema must not outlast the budget.
    The outcome is kept per schema text (its hash, ``_META_CHECKED``): a catalogue's schema is checked once, not
    per call."""
    import hashlib

    key = hashlib.sha256(dump_json(schema, sort_keys=True).encode()).hexdigest()
    found = _META_CHECKED.get(key)
    if found is None:
        found = (_meta_schema_error(cls, schema, deadline),)
        if len(_META_CHECKED) >= _META_CHECKED_KEPT:
            _META_CHECKED.clear()
        _META_CHECKED[key] = found
    if found[0] is not None:
        raise found[0].with_traceback(None)


def _meta_schema_error(cls: Any, schema: Any, deadline: Deadline | None) -> Any:
    """The first ``SchemaError`` of ``schema`` against ``cls``'s meta-schema, or None (see ``check_schema``); a
    deep schema is checked in pieces (``_schema_pieces``), so its depth never meets Python's recursion limit."""
    from jsonschema import exceptions as jexc

    if deadline is None or not hasattr(cls, "META_SCHEMA"):
        for piece in _schema_pieces(schema):
            try:
                cls.check_schema(piece)
            except jexc.SchemaError as exc:
                return exc
        return None
    from jsonschema import validators

    meta = validators.validator_for(cls.META_SCHEMA, default=cls)
    meta = validators.extend(meta, _timed_validators(dict(meta.VALIDATORS), deadline))
    resolver = _timed_resolver_class().from_schema(cls.META_SCHEMA, id_of=meta.ID_OF)
    resolver.deadline = deadline
    checker = meta(cls.META_SCHEMA, resolver=resolver, format_checker=meta.FORMAT_CHECKER)
    for piece in _schema_pieces(schema):
        for error in checker.iter_errors(piece):
            return jexc.SchemaError.create_from(error)
    return None


# The meta-schema pass recurses about ten Python frames per schema level, so a schema a few hundred levels deep (the
# JSON parser takes ~1000) would end it with RecursionError. Subschemas are checked against the meta-schema on
# their own, wherever they sit, so a deep schema is checked as pieces: each no deeper than _META_PIECE_DEPTH levels,
# a deeper subschema replaced by {} (a schema in every draft) and checked as the next piece.
_META_PIECE_DEPTH = 16
_ONE_SCHEMA = frozenset(
    ("items", "additionalItems", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames")
    + ("unevaluatedProperties", "unevaluatedItems")
)
_SCHEMA_LISTS = frozenset(("allOf", "anyOf", "oneOf", "prefixItems", "items"))


def _schema_pieces(schema: Any) -> Iterator[Any]:
    """``schema`` cut for the meta-schema pass (above): the whole when it is shallow, else its pieces in turn."""
    pending = [schema]
    while pending:
        yield _cut_schema(pending.pop(), 0, pending)


def _cut_schema(schema: Any, level: int, cut: list[Any]) -> Any:
    if not isinstance(schema, dict):
        return schema
    if level >= _META_PIECE_DEPTH:
        cut.append(schema)
        return {}
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            out[key] = {name: _cut_schema(sub, level + 1, cut) for name, sub in value.items()}
        elif key in _ONE_SCHEMA and isinstance(value, dict):
            out[key] = _cut_schema(value, level + 1, cut)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [_cut_schema(sub, level + 1, cut) for sub in value]
        else:
            out[key] = value
    return out


_META_CHECKED: dict[str, tuple[Any]] = {}  # SHA-256 of the schema text -> (its SchemaError or None), for check_schema
_META_CHECKED_KEPT = 256
_TIMED_RESOLVER: list[Any] = []


def _timed_resolver_class() -> Any:
    """A ``RefResolver`` whose ``push_scope`` (every ``$ref`` and ``$dynamicRef`` taken) first checks its
    ``deadline``: the meta-schemas descend into each subschema by reference."""
    if not _TIMED_RESOLVER:
        import jsonschema

        class TimedResolver(jsonschema.RefResolver):
            deadline: Deadline  # set on each instance before use

            def push_scope(self, scope: str) -> None:
                self.deadline.remaining()
                super().push_scope(scope)

        with _VALIDATORS_LOCK:
            if not _TIMED_RESOLVER:
                _TIMED_RESOLVER.append(TimedResolver)
    return _TIMED_RESOLVER[0]


def validator_class(schema: dict[str, Any]) -> tuple[Any, Any]:
    """(validator class, resolver class) for the schema's dialect: JSON number semantics for Decimal/JsonNumber,
    every keyword checking the running validation's deadline, pattern matching within the limits above, remote
    ``$ref`` refused. Built once per dialect under a lock and shared by every call and thread."""
    from jsonschema import validators  # lazily: only the call path validates

    dialect = schema.get("$schema")
    if "$schema" in schema:
        base = validators.validator_for(schema, default=None) if isinstance(dialect, str) else None
        if base is None:
            raise NotLocal(f"unknown $schema dialect {short_text(dialect)}")
    else:
        base = validators.validator_for(schema)
    built = _VALIDATORS.get(base)
    if built is not None:
        return built  # type: ignore[no-any-return]
    with _VALIDATORS_LOCK:
        built = _VALIDATORS.get(base)
        if built is None:
            built = _VALIDATORS[base] = _build_validator(base)
        return built  # type: ignore[no-any-return]


def validation_state() -> Any:
    global _VALIDATION_STATE
    if _VALIDATION_STATE is None:
        import threading

        with _VALIDATORS_LOCK:
            if _VALIDATION_STATE is None:
                _VALIDATION_STATE = threading.local()
    return _VALIDATION_STATE


def _build_validator(base: Any) -> tuple[Any, Any]:
    import jsonschema
    from jsonschema import validators

    checker = base.TYPE_CHECKER.redefine_many(
        {
            "integer": lambda _checker, value: is_json_integer(value),
            "number": lambda _checker, value: is_json_number(value),
        }
    )

    def multiple_of(validator: Any, divisor: Any, instance: Any, _schema: Any) -> Any:
        from jsonschema.exceptions import ValidationError

        if not is_json_number(instance) or not is_json_number(divisor):
            return
        if any(isinstance(n, decimal.Decimal) and abs(n.adjusted()) > 4000 for n in (instance, divisor)):
            raise NotLocal("multipleOf on a number too large to check exactly")
        import fractions

        quotient = fractions.Fraction(instance) / fractions.Fraction(divisor)
        if quotient.denominator != 1:
            yield ValidationError(f"must be a multiple of {short_text(divisor)}")

    extended = validators.extend(base, {"multipleOf": multiple_of}, type_checker=checker)

    class LocalOnlyResolver(jsonschema.RefResolver):
        def resolve_remote(self, uri: str) -> Any:
            raise NotLocal(f"the schema references {short_text(uri, 80)}, which is never fetched")

    return validators.extend(extended, _guarded_validators(extended)), LocalOnlyResolver


_RESOLVERS_PER_THREAD = 32


def take_resolver(state: Any, schema: dict[str, Any], cls: Any, resolver_class: Any) -> Any:
    """A resolver for ``schema``: the one the last validation of this same schema object on this thread left
    (building one costs more than validating a small schema), else a new one. It is taken out while in use."""
    kept = getattr(state, "resolvers", None)
    entry = kept.pop(id(schema), None) if kept is not None else None
    if entry is not None and entry[0] is schema and entry[1] is resolver_class and entry[2] == cls.ID_OF(schema):
        return entry[3]
    return resolver_class.from_schema(schema, id_of=cls.ID_OF)


def keep_resolver(state: Any, schema: dict[str, Any], cls: Any, resolver_class: Any, resolver: Any) -> None:
    """After a validation that ended normally (its scope stack is back to the schema's base URI; remote documents
    are never fetched, so its store holds only the meta-schemas): the next validation may reuse it."""
    kept = getattr(state, "resolvers", None)
    if kept is None:
        kept = state.resolvers = {}
    elif len(kept) >= _RESOLVERS_PER_THREAD:
        kept.clear()
    kept[id(schema)] = (schema, resolver_class, cls.ID_OF(schema), resolver)


# Most inputSchemas are a handful of typed properties, and most calls pass them: loading jsonschema (its
# validators module builds every draft's meta-schema, its format module probes optional packages) costs a
# one-shot call about as much as all the rest of it (issue 17). So before jsonschema is imported, a schema made
# only of the keywords below, with well-formed values, is checked here. This path only ever answers "valid, with
# nothing skipped", which it gives exactly when jsonschema would find no error and raise nothing; anything else —
# a problem to report, a keyword it does not know, a value jsonschema could choke on — goes to jsonschema as
# before, so every outcome (problems, messages, scope, notes) is the one jsonschema gives
# (tests/unit/test_validation_differential.py compares the two over the fuzz corpus).

# -- 8.6 validation: the quick path, problems worded, validate_arguments -----------------------------------------------

_QUICK_DIALECTS = {  # $schema -> its dialect in jsonschema 4.17.3 (no $schema: the latest, draft 2020-12)
    "https://json-schema.org/draft/2020-12/schema": "draft2020-12",
    "https://json-schema.org/draft/2020-12/schema#": "draft2020-12",
    "https://json-schema.org/draft/2019-09/schema": "draft2019-09",
    "https://json-schema.org/draft/2019-09/schema#": "draft2019-09",
    "http://json-schema.org/draft-07/schema": "draft7",
    "http://json-schema.org/draft-07/schema#": "draft7",
    "http://json-schema.org/draft-06/schema": "draft6",
    "http://json-schema.org/draft-06/schema#": "draft6",
}
_QUICK_COMMON = (
    "$ref additionalItems additionalProperties allOf anyOf const contains enum exclusiveMaximum exclusiveMinimum "
    "format items maxItems maxLength maxProperties maximum minItems minLength minProperties minimum multipleOf not "
    "oneOf pattern patternProperties properties propertyNames required type uniqueItems"
).split()
_DIALECT_KEYWORDS = {  # a keyword outside its dialect's set is ignored by jsonschema, so it is here too
    "draft6": frozenset([*_QUICK_COMMON, "dependencies"]),
    "draft7": frozenset([*_QUICK_COMMON, "dependencies", "if"]),
    "draft2019-09": frozenset(
        [*_QUICK_COMMON, "$recursiveRef", "dependentRequired", "dependentSchemas", "if"]
        + ["unevaluatedItems", "unevaluatedProperties"]
    ),
    "draft2020-12": frozenset(
        [*_QUICK_COMMON, "$dynamicRef", "dependentRequired", "dependentSchemas", "if", "prefixItems"]
        + ["unevaluatedItems", "unevaluatedProperties"]
    ),
}
_QUICK_KEYWORDS = frozenset(  # what this path decides; the same code in every dialect above (jsonschema 4.17.3)
    "additionalProperties allOf anyOf const enum exclusiveMaximum exclusiveMinimum format items maxItems maxLength "
    "maxProperties maximum minItems minLength minProperties minimum not oneOf properties required type".split()
)
_QUICK_DEPTH = 32  # deeper schemas go to jsonschema, whose recursion limit then decides as before
_QUICK_TYPES = frozenset(("string", "integer", "number", "boolean", "array", "object", "null"))
_QUICK_SIZES = ("maxItems", "maxLength", "maxProperties", "minItems", "minLength", "minProperties")
_QUICK_BOUNDS = ("exclusiveMaximum", "exclusiveMinimum", "maximum", "minimum")


def _quick_schema(schema: Any, keywords: frozenset[str], depth: int) -> bool:
    """``schema`` (a subschema) uses only keywords this path decides, each with a value jsonschema takes without
    raising, and no ``$schema`` or ``$id`` (which would change the validator class or the resolution scope)."""
    if schema is True or schema is False:
        return True
    if not isinstance(schema, dict) or depth > _QUICK_DEPTH:
        return False
    if (depth and "$schema" in schema) or "$id" in schema:
        return False
    for key, value in schema.items():
        if key not in keywords:
            continue  # not a keyword of the dialect: jsonschema ignores it
        if key not in _QUICK_KEYWORDS:
            return False
        if key == "type":
            types = [value] if isinstance(value, str) else value
            ok = isinstance(types, list) and all(isinstance(t, str) and t in _QUICK_TYPES for t in types)
        elif key == "properties":
            ok = isinstance(value, dict) and all(_quick_schema(s, keywords, depth + 1) for s in value.values())
        elif key in ("additionalProperties", "items", "not"):
            ok = _quick_schema(value, keywords, depth + 1)
        elif key in ("allOf", "anyOf", "oneOf"):
            ok = isinstance(value, list) and bool(value) and all(_quick_schema(s, keywords, depth + 1) for s in value)
        elif key == "required":
            ok = isinstance(value, list) and all(isinstance(r, str) for r in value)
        elif key == "enum":
            ok = isinstance(value, list)
        elif key in _QUICK_SIZES:
            ok = type(value) is int and value >= 0
        elif key in _QUICK_BOUNDS:
            ok = is_json_number(value)
        else:  # const and format: any value (format asserts nothing: bkmcp's validators have no format checker)
            ok = True
        if not ok:
            return False
    return True


_QUICK_TRUE, _QUICK_FALSE = object(), object()


def _quick_unbool(value: Any) -> Any:
    """jsonschema's ``_utils.unbool``: True and False stop comparing equal to 1 and 0."""
    if value is True:
        return _QUICK_TRUE
    if value is False:
        return _QUICK_FALSE
    return value


def _quick_equal(one: Any, two: Any) -> bool:
    """jsonschema's ``_utils.equal`` (``const``), line for line."""
    if isinstance(one, str) or isinstance(two, str):
        return bool(one == two)
    if isinstance(one, Sequence) and isinstance(two, Sequence):
        return len(one) == len(two) and all(_quick_equal(i, j) for i, j in zip(one, two))
    if isinstance(one, Mapping) and isinstance(two, Mapping):
        return len(one) == len(two) and all(key in two and _quick_equal(value, two[key]) for key, value in one.items())
    return bool(_quick_unbool(one) == _quick_unbool(two))


def _quick_valid(schema: Any, instance: Any, deadline: Deadline | None) -> bool:
    """Whether ``instance`` passes ``schema`` (checked by ``_quick_schema``), keyword by keyword as jsonschema
    4.17.3 (_validators.py, _legacy_validators.py) decides them, with bkmcp's integer and number types; like
    bkmcp's jsonschema classes, each keyword first checks ``deadline`` (``mcp_timeout`` once it is spent)."""
    if schema is True or schema is False:
        return schema
    is_object, is_array, is_string = isinstance(instance, dict), isinstance(instance, list), isinstance(instance, str)
    is_number = is_json_number(instance)
    for key, value in schema.items():
        if key not in _QUICK_KEYWORDS:
            continue  # ignored, or not a keyword of this dialect (_quick_schema saw to the rest)
        if deadline is not None:
            deadline.remaining()
        if key == "type":
            ok = any(TYPE_TESTS[t](instance) for t in ([value] if isinstance(value, str) else value))
        elif key == "properties":
            ok = not is_object or all(_quick_valid(s, instance[p], deadline) for p, s in value.items() if p in instance)
        elif key == "additionalProperties":
            ok = True
            if is_object:
                declared = schema.get("properties", {})
                extras = [instance[p] for p in instance if p not in declared]
                if isinstance(value, dict):
                    ok = all(_quick_valid(value, extra, deadline) for extra in extras)
                else:
                    ok = bool(value) or not extras
        elif key == "required":
            ok = not is_object or all(r in instance for r in value)
        elif key == "items":
            ok = not is_array or all(_quick_valid(value, item, deadline) for item in instance)
        elif key == "enum":
            if instance == 0 or instance == 1:
                unbooled = _quick_unbool(instance)
                ok = not all(unbooled != _quick_unbool(each) for each in value)
            else:
                ok = instance in value
        elif key == "const":
            ok = _quick_equal(instance, value)
        elif key == "allOf":
            ok = all(_quick_valid(s, instance, deadline) for s in value)
        elif key == "anyOf":
            ok = any(_quick_valid(s, instance, deadline) for s in value)
        elif key == "oneOf":
            ok = sum(1 for s in value if _quick_valid(s, instance, deadline)) == 1
        elif key == "not":
            ok = not _quick_valid(value, instance, deadline)
        elif key in ("minLength", "maxLength"):
            ok = not is_string or (len(instance) >= value if key == "minLength" else len(instance) <= value)
        elif key in ("minItems", "maxItems"):
            ok = not is_array or (len(instance) >= value if key == "minItems" else len(instance) <= value)
        elif key in ("minProperties", "maxProperties"):
            ok = not is_object or (len(instance) >= value if key == "minProperties" else len(instance) <= value)
        elif key in _QUICK_BOUNDS and is_number:
            ok = not (
                key == "minimum"
                and instance < value
                or key == "maximum"
                and instance > value
                or key == "exclusiveMinimum"
                and instance <= value
                or key == "exclusiveMaximum"
                and instance >= value
            )
        else:
            ok = True
        if not ok:
            return False
    return True


def _quickly_valid(schema: dict[str, Any], arguments: Any, deadline: Deadline | None = None) -> bool:
    """True when ``arguments`` certainly pass ``schema`` with nothing skipped, decided without jsonschema; False
    means "ask jsonschema" (a problem, or a schema this path does not decide), never "invalid"."""
    dialect = schema.get("$schema") if "$schema" in schema else "https://json-schema.org/draft/2020-12/schema"
    keywords = _DIALECT_KEYWORDS.get(_QUICK_DIALECTS.get(dialect, "")) if isinstance(dialect, str) else None
    if keywords is None or not _quick_schema(schema, keywords, 0):
        return False
    try:
        return _quick_valid(schema, arguments, deadline)
    except McpTimeoutError:
        raise
    except Exception:  # a comparison jsonschema would fail on too: let it say so
        return False


_JSONSCHEMA_FOUND: list[bool] = []


def _jsonschema_importable() -> bool:
    """jsonschema can be imported — found, not loaded: without it validation stays "basic", as it always did."""
    if "jsonschema" in sys.modules:
        return sys.modules["jsonschema"] is not None
    if _JSONSCHEMA_FOUND:
        return True
    import importlib.util

    try:
        found = importlib.util.find_spec("jsonschema") is not None
    except (ImportError, ValueError):
        return False
    if found:
        _JSONSCHEMA_FOUND.append(True)
    return found


def _schema_problems(
    schema: dict[str, Any], arguments: Mapping[str, Any], budget: ValidationBudget | None = None
) -> list[dict[str, str]]:
    """The full schema via jsonschema; ``NotLocal`` when that is not possible without the network or within
    bkmcp's bounds (``unbounded_schema``)."""
    unbounded = unbounded_schema(schema, SCHEMA_NODE_LIMIT)
    if unbounded is not None:
        raise NotLocal(unbounded)
    remote: list[str] = []
    non_local_refs(schema, remote)
    if remote:
        raise NotLocal(f"the schema references {short_text(remote[0], 80)}, which is never fetched")
    depth = json_depth(arguments)
    if depth > recursion_ceiling():  # deeper than an answer or a --body bkmcp parses: left to the server
        raise NotLocal(f"the arguments are {too_deep_words()}")
    levels = depth + json_depth(schema)
    try:  # as deep as bkmcp parses: the validators recurse ~10 Python frames a level (issue 36 item 7)
        if levels <= _IN_PLACE_LEVELS:
            return _jsonschema_problems(schema, arguments, budget)
        problems: list[dict[str, str]] = call_with_headroom(
            lambda: _jsonschema_problems(schema, arguments, budget), levels * 16
        )
        return problems
    except RecursionError:  # 3.12 and 3.13 count C recursion apart (a fixed limit); a $ref that loops in place
        raise NotLocal(
            "the arguments and their schema are nested too deeply to check locally (Python's recursion limit)"
        ) from None


_IN_PLACE_LEVELS = 40  # arguments' and schema's levels (together) validated on the caller's own stack


def _jsonschema_problems(
    schema: dict[str, Any], arguments: Mapping[str, Any], budget: ValidationBudget | None
) -> list[dict[str, str]]:
    """``_schema_problems`` once the schema is known local and bounded: the quick path, then jsonschema."""
    if _jsonschema_importable() and _quickly_valid(schema, arguments, budget.deadline if budget else None):
        return []  # what jsonschema would answer, without loading it (above)
    try:
        from jsonschema import exceptions as jexc
    except ImportError:
        raise NotLocal("the jsonschema library is not available") from None
    state = validation_state()
    previous = getattr(state, "budget", None)
    state.budget = budget or ValidationBudget(None)  # what the shared validator class checks, on this thread
    try:
        cls, resolver_class = validator_class(schema)
        resolver = take_resolver(state, schema, cls, resolver_class)
        try:
            errors = list(cls(schema, resolver=resolver).iter_errors(arguments))
            keep_resolver(state, schema, cls, resolver_class, resolver)
        except (jexc.RefResolutionError, NotLocal, McpTimeoutError):
            raise
        except (Exception, RecursionError):
            check_schema(cls, schema, state.budget.deadline)  # a SchemaError explains the failure better
            raise
        if errors:
            # Checking the schema against its meta-schema costs ~100x the validation itself, so it runs only
            # when there are problems to report: a malformed schema must never block a call with false ones.
            check_schema(cls, schema, state.budget.deadline)
    except jexc.SchemaError as exc:
        if exc.validator == "format":  # e.g. an ECMA-262 regex Python's re cannot compile
            raise NotLocal(
                f"the inputSchema uses a {exc.validator_value} this local validator cannot check "
                f"({short_text(exc.message, 80)})"
            ) from None
        raise NotLocal(f"the inputSchema is not a valid JSON Schema ({short_text(exc.message, 80)})") from None
    except jexc.RefResolutionError as exc:
        cause = exc._cause if isinstance(getattr(exc, "_cause", None), NotLocal) else None
        raise NotLocal(
            str(cause) if cause else f"a $ref could not be resolved locally ({short_text(str(exc), 80)})"
        ) from None
    except (NotLocal, McpTimeoutError, RecursionError):
        raise
    except Exception as exc:  # a validator bug or an exotic keyword must not crash the call
        raise NotLocal(f"local validation failed ({type(exc).__name__})") from None
    finally:
        state.budget = previous
    return [p for e in errors for p in _problems_from_error(e)]


def _problems_from_error(error: Any) -> list[dict[str, str]]:
    """Readable problems for one jsonschema error (JSON paths, JSON values, never Python reprs)."""
    if error.validator == "required" and isinstance(error.validator_value, list) and isinstance(error.instance, dict):
        missing = [r for r in error.validator_value if isinstance(r, str) and r not in error.instance]
        if missing:  # one problem per missing property, at the path where it belongs
            base = list(error.absolute_path)
            return [{"path": json_path([*base, name]), "message": "required property is missing"} for name in missing]
    return [_problem_from_error(error)]


def _problem_from_error(error: Any) -> dict[str, str]:
    keyword, value, instance = error.validator, error.validator_value, error.instance
    if keyword == "type":
        types = value if isinstance(value, list) else [value]
        message = f"expected {' or '.join(str(t) for t in types)}, got {json_type(instance, integers=True)}"
    elif keyword == "enum":
        message = f"must be one of {short_text(value, 200)}"
    elif keyword == "const":
        message = f"must be {short_text(value, 200)}"
    elif keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum") and is_json_number(value):
        words = {
            "minimum": "at least",
            "maximum": "at most",
            "exclusiveMinimum": "greater than",
            "exclusiveMaximum": "less than",
        }
        message = f"must be {words[keyword]} {short_text(value)}, got {short_text(instance)}"
    else:
        message = str(error.message)
        try:  # jsonschema starts most messages with repr(instance); show JSON instead of Python reprs
            shown = repr(instance)
            if message.startswith(shown):
                message = short_text(dump_json(instance), 60) + message[len(shown) :]
        except Exception:  # pragma: no cover - repr of plain JSON values does not fail
            pass
        message = printable(message)
    return {"path": json_path(list(error.absolute_path)), "message": message}


def _problem_line(problem: Mapping[str, str], given: Mapping[str, str]) -> str:
    """``$.a.b: message``; for a value given as a flag (``given``: its path -> ``--a``) ``--a: message`` or
    ``--a at $.a.b: message``."""
    flag = problem.get("flag")
    if flag is None:
        return f"{problem['path']}: {problem['message']}"
    if problem["path"] in given:
        return f"{short_text(flag, 60)}: {problem['message']}"
    return f"{short_text(flag, 60)} at {problem['path']}: {problem['message']}"


def validate_arguments(
    tool: Mapping[str, Any],
    arguments: Mapping[str, Any],
    *,
    deadline: Deadline | None = None,
    flags: Iterable[str] = (),
) -> ArgumentCheck:
    """Check the final arguments object before any ``tools/call`` (docs/contract.md §6, P03, P05).

    Always: required fields, declared top-level types and ``enum``/``const``. With jsonschema (imported here,
    lazily): the whole schema when it is self-contained; a remote ``$ref`` is never fetched. Returns what was
    actually checked (``ArgumentCheck``); raises ``invalid_mcp_arguments`` listing every problem with its path.

    Bounded: each schema keyword first checks ``deadline`` (``mcp_timeout`` once the operation's budget is spent),
    and patterns that could backtrack for long (``regex_risk``) are left to the server, noted in the result.
    ``flags`` names the properties the user gave as flags: a problem inside one names its flag (``--name``).
    """
    schema = schema_object(tool)
    if schema is None:
        return ArgumentCheck("basic", ("the tool has no inputSchema object",))
    notes: list[str] = []
    budget = ValidationBudget(deadline)
    try:
        problems = _schema_problems(schema, arguments, budget)
        scope = "full"
        notes += budget.skipped
    except NotLocal as exc:
        notes.append(str(exc))
        problems = basic_problems(schema, arguments)
        scope = "basic"
    if problems:
        unique: list[dict[str, str]] = []
        for problem in problems:
            if problem not in unique:
                unique.append(problem)
        unique.sort(key=lambda p: p["path"])
        given = {json_path([name]): f"--{name}" for name in flags}
        for at, option in given.items():
            for problem in unique:
                if problem["path"] == at or problem["path"].startswith((at + ".", at + "[")):
                    problem["flag"] = option
        lines = "; ".join(_problem_line(p, given) for p in unique[:5])
        more = f"; and {len(unique) - 5} more" if len(unique) > 5 else ""
        checked = "the full inputSchema" if scope == "full" else "required fields, types and enum only"
        raise InvalidArgumentsError(
            f"arguments for tool {tool.get('name')!r} do not match its inputSchema: {lines}{more}",
            hint=f"checked locally: {checked}" + (f" ({notes[0]})" if notes else ""),
            details={"problems": unique, "validation": scope},
        )
    return ArgumentCheck(scope, tuple(notes))


# -- 8.7 answers to a server's questions: --input typed by the requested schema, the terminal form (CommandLineInput) --


def _answer_flags(schema: Any) -> ToolFlags:
    """The requested schema's fields as flags (``build_tool_flags``): ``--input FIELD=VALUE`` is typed as a tool's
    ``--FIELD VALUE`` is (docs/contract.md §5, §6)."""
    return build_tool_flags({"inputSchema": schema if isinstance(schema, dict) else {"type": "object"}})


def _schema_fields(schema: Any) -> dict[str, Any]:
    properties = schema.get("properties") if isinstance(schema, dict) else None
    return properties if isinstance(properties, dict) else {}


def type_answer(schema: Any, field_name: str, text: str) -> Any:
    """One answer's text -> its JSON value by the field's schema; ``ValueError`` saying why it does not fit."""
    flags = _answer_flags(schema)
    flag = flags.flags.get(field_name)
    prop = _schema_fields(schema).get(field_name)
    if flag is None and isinstance(prop, dict):  # a name that is a bkmcp option still types as its schema says
        kind = property_kind(prop)[0]
        flag = ToolFlag(field_name, kind, False, prop) if kind is not None else None
    if flag is None:  # a schema no text can be typed by (false, a remote $ref): JSON through --inputs
        raise ValueError(f"{printable(field_name)!r} cannot be typed from text; give it in --inputs as JSON")
    return convert_flag_value(flag, ToolToken(field_name, text, True, f"{field_name}={text}"))


def with_defaults(schema: Any, content: Mapping[str, Any]) -> dict[str, Any]:
    """``content`` with each field not given set to its schema ``default`` (SEP-1034)."""
    out = dict(content)
    for name, prop in _schema_fields(schema).items():
        if name not in out and isinstance(prop, dict) and "default" in prop:
            out[name] = prop["default"]
    return out


def content_problems(schema: Any, content: Mapping[str, Any]) -> tuple[dict[str, str], ...]:
    """Why ``content`` does not fit the requested schema (checked locally, as tool arguments are: contract §6)."""
    try:
        validate_arguments({"name": "the question", "inputSchema": schema if isinstance(schema, dict) else {}}, content)
    except InvalidArgumentsError as exc:
        return tuple(exc.details.get("problems") or ({"message": exc.message},))
    return ()


def choices_of(prop: Mapping[str, Any]) -> list[tuple[Any, str]]:
    """A field's choices (SEP-1330): ``enum`` (titled by legacy ``enumNames``), ``oneOf``/``anyOf`` of ``const``
    with ``title``, and an array's ``items`` the same way (multi-select); (value, label) each."""
    items = prop.get("items")
    target: Mapping[str, Any] = items if prop.get("type") == "array" and isinstance(items, dict) else prop
    enum = target.get("enum")
    if isinstance(enum, list):
        names = target.get("enumNames")
        names = names if isinstance(names, list) else []
        return [(v, str(names[i]) if i < len(names) else short_text(v, 80)) for i, v in enumerate(enum)]
    for key in ("oneOf", "anyOf"):
        options = target.get(key)
        if isinstance(options, list) and options and all(isinstance(o, dict) and "const" in o for o in options):
            return [(o["const"], str(o.get("title", short_text(o["const"], 80)))) for o in options]
    return []


class CommandLineInput(InputSource):
    """The CLI's answers (docs/contract.md §5): ``--input FIELD=VALUE`` (``given``, typed by the requested schema),
    ``--inputs`` (``inputs``: an object keyed by field, or by the ``inputRequests`` key when a round asks several),
    ``--input-action decline|cancel`` (``action``), else a person on the terminal (``terminal``). A field not given
    takes its schema ``default`` (SEP-1034). No answer at hand: None, never a made-up one. ``keep`` (the CLI's resume
    store) keeps a 2026-07-28 round nobody answered."""

    def __init__(
        self,
        given: Sequence[tuple[str, str]] = (),
        inputs: Mapping[str, Any] | None = None,
        action: str | None = None,
        terminal: TerminalQuestions | None = None,
        keep: Callable[[str, Mapping[str, Any], InputRound, str | None], dict[str, Any]] | None = None,
        resuming: bool = False,
    ) -> None:
        self.given = list(given)
        self.inputs = inputs
        self.action = action
        self.terminal = terminal
        self.keep = keep
        self.resuming = resuming
        answers = bool(self.given) or inputs is not None or action is not None or resuming
        self.capabilities = ELICITATION_FORM_AND_URL if terminal is not None else ELICITATION_FORM if answers else {}

    def answer(self, key: str | None, request: Mapping[str, Any], several: bool) -> InputAnswer:
        method = request.get("method")
        if method != "elicitation/create":
            return InputAnswer(None, unsupported=str(method))
        params = request.get("params")
        params = params if isinstance(params, dict) else {}
        if self.action is not None:  # the user said so: the only way bkmcp ever answers decline
            return InputAnswer({"action": self.action})
        if params.get("mode", "form") == "url":
            return self.terminal.ask_url(params) if self.terminal is not None else InputAnswer(None)
        schema = params.get("requestedSchema")
        content, problems, given = self.typed(key, schema, several)
        if not given:
            return self.terminal.ask_form(params) if self.terminal is not None else InputAnswer(None)
        if problems:
            return InputAnswer(None, tuple(problems))
        content = with_defaults(schema, content)
        problems = list(content_problems(schema, content))
        return InputAnswer(None, tuple(problems)) if problems else InputAnswer({"action": "accept", "content": content})

    def typed(self, key: str | None, schema: Any, several: bool) -> tuple[dict[str, Any], list[dict[str, str]], bool]:
        """(the answers given for this question, typed; problems; whether any answer was given for it at all). A
        field the question does not have is left for another question: answers for every round of a multi-round
        request can be given at once; answers that fit no field leave the question unanswered (reported)."""
        fields = _schema_fields(schema)
        content: dict[str, Any] = {}
        problems: list[dict[str, str]] = []
        given = self.inputs is not None
        if self.inputs is not None:
            chosen = self.inputs.get(key) if key is not None else None
            if isinstance(chosen, dict) and key not in fields:
                content.update(chosen)
            else:  # keyed by field: each question takes its own fields
                content.update({k: v for k, v in self.inputs.items() if k in fields})
        for name, text in self.given:
            if name not in fields:
                continue  # another question's field (a later round's, or another key's)
            given = True
            try:
                content[name] = type_answer(schema, name, text)
            except ValueError as exc:
                problems.append({"path": json_path([name]), "message": f"--input {printable(name)}: {exc}"})
        return content, problems, given

    def park(self, method: str, params: Mapping[str, Any], pending: InputRound, era: str | None) -> dict[str, Any]:
        return self.keep(method, params, pending, era) if self.keep is not None else {}


class TerminalQuestions:
    """A person on the terminal answers (docs/contract.md §5): each form field prompted on ``out`` with its title,
    type, choices and default (Enter keeps the default), the answers reviewed before they are sent; a URL shown with
    its host and asked consent for, never opened by bkmcp. Server text is made terminal-safe first (no control
    characters reach the terminal). End of input, or no, is ``cancel``; ``decline`` only when the person says so."""

    TRIES = 3  # a field typed wrong this many times ends the form (cancel)

    def __init__(self, stdin: IO[str], out: IO[str]) -> None:
        self.stdin, self.out = stdin, out

    def say(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def ask(self, prompt: str) -> str | None:
        self.say(prompt)
        line = self.stdin.readline()
        return None if not line else line.rstrip("\r\n")

    def ask_form(self, params: Mapping[str, Any]) -> InputAnswer:
        schema = params.get("requestedSchema")
        fields = _schema_fields(schema)
        listed = schema.get("required") if isinstance(schema, dict) else None
        required: list[Any] = listed if isinstance(listed, list) else []
        self.say(f"\nThe server asks: {terminal_safe(str(params.get('message', '')))}\n")
        content: dict[str, Any] = {}
        for name, prop in fields.items():
            prop = prop if isinstance(prop, dict) else {}
            value = self.ask_field(schema, name, prop, name in required)
            if value is _CANCELLED:
                self.say("(no answer: cancelled)\n")
                return InputAnswer(None)
            if value is not _SKIPPED:
                content[name] = value
        problems = content_problems(schema, content)
        if problems:
            self.say(f"the answers do not fit: {terminal_safe(problems[0].get('message', ''))}\n")
            return InputAnswer(None, problems)
        self.say(
            "Answers:\n"
            + "".join(f"  {terminal_safe(k)} = {terminal_safe(dump_json(v))}\n" for k, v in content.items())
        )
        said = (self.ask("Send them? [y]es, [n]o (cancel), [d]ecline: ") or "").strip().lower()
        if said in ("y", "yes"):
            return InputAnswer({"action": "accept", "content": content})
        if said in ("d", "decline"):
            return InputAnswer({"action": "decline"})
        return InputAnswer({"action": "cancel"})  # the person chose not to send

    def ask_field(self, schema: Any, name: str, prop: Mapping[str, Any], required: bool) -> Any:
        title = terminal_safe(str(prop.get("title") or name))
        declared = prop.get("type")
        kind = declared if isinstance(declared, str) else "value"
        description = prop.get("description")
        choices = choices_of(prop)
        lines = [f"  {title} ({terminal_safe(kind)}{', required' if required else ''})"]
        if isinstance(description, str) and description.strip():
            lines.append(f"    {terminal_safe(description.strip())[:300]}")
        for index, (value, label) in enumerate(choices, 1):
            lines.append(f"    {index}) {terminal_safe(label)} [{terminal_safe(short_text(value, 60))}]")
        self.say("\n".join(lines) + "\n")
        shown = f" [{terminal_safe(short_text(prop['default'], 60))}]" if "default" in prop else ""
        for _ in range(self.TRIES):
            text = self.ask(f"  {title}{shown}: ")
            if text is None:
                return _CANCELLED
            if text == "":
                if "default" in prop:
                    return prop["default"]
                if not required:
                    return _SKIPPED
                self.say("  an answer is required\n")
                continue
            if choices and text.isdigit() and 1 <= int(text) <= len(choices) and kind != "array":
                return choices[int(text) - 1][0]
            try:
                return type_answer(schema, name, text)
            except ValueError as exc:
                self.say(f"  {terminal_safe(str(exc))}\n")
        return _CANCELLED

    def ask_url(self, params: Mapping[str, Any]) -> InputAnswer:
        from urllib.parse import urlsplit

        url = str(params.get("url", ""))
        try:
            host = urlsplit(url).hostname or "(no host)"
        except ValueError:
            host = "(unparsable)"
        self.say(
            f"\nThe server asks you to open a URL: {terminal_safe(str(params.get('message', '')))}\n"
            f"  host: {terminal_safe(host)}\n  URL:  {terminal_safe(url)}\n"
            "bkmcp does not open it; open it yourself only if you trust that host.\n"
        )
        said = (self.ask("Consent (you will open it)? [y]es, [n]o (decline), Enter: cancel: ") or "").strip().lower()
        if said in ("y", "yes"):
            return InputAnswer({"action": "accept"})
        if said in ("n", "no"):
            return InputAnswer({"action": "decline"})
        return InputAnswer({"action": "cancel"})


_CANCELLED = object()  # a field the person did not answer (end of input, too many wrong tries)
_SKIPPED = object()  # an optional field left empty


# ======================================================================================================
# 9. Output: envelopes, --jq, help text
# ======================================================================================================


# -- 9.1 envelopes (build_success, build_failure) ----------------------------------------------------------------------


def build_success(data: dict[str, Any]) -> dict[str, Any]:
    return {"ok": True, "data": data}


def build_failure(error: BkmcpError, redactor: Redactor | None = None) -> dict[str, Any]:
    """Failure envelope. Diagnostics are scrubbed of secrets; a remote result kept in ``data`` is not."""
    scrub = redactor.scrub_value if redactor else (lambda v: v)
    envelope: dict[str, Any] = {"ok": False, "error": scrub(error.error_object())}
    if error.data is not None:
        envelope["data"] = error.data
    return envelope


# -- 9.2 --jq: JqProgram, compiled and applied with number fidelity ----------------------------------------------------

_DOUBLE_EXACT = 2**53
_JQ_MARK = "\ue000bkmcp-num-"


def _load_jq_module() -> Any:
    """The ``jq`` binding, or None when no native build fits this interpreter/platform.

    Inside ``bkmcp.pyz`` the binding's native module is extracted on first use into the per-user cache by the
    artifact's boot module (docs/building.md); from a checkout or ``pip install`` it is an ordinary import.
    """
    try:
        import _bkmcp_boot  # type: ignore[import-not-found]  # exists only inside bkmcp.pyz
    except ImportError:
        pass
    else:
        module = _bkmcp_boot.load_native_module("jq")
        if module is not None:
            return module
    try:
        import jq  # type: ignore[import-not-found]
    except ImportError:
        return None
    return jq


_JQ_SYNTAX_HINT = "fix the jq syntax; quote the expression in single quotes so the shell leaves it alone"


class JqHalt(Exception):
    """``halt_error`` in a ``--jq`` program: the message as jq prints it on stderr and the exit status."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


class _JqOverBudget(Exception):
    """The ``--jq`` program ran past the operation's budget."""


JQ_MIN_BUDGET = 1.0  # seconds --jq always gets, even after an operation that spent its whole --timeout
JQ_EXECUTABLE_CHECK_SECONDS = 10.0  # compiling with a jq executable: a jq that answers nothing in this is unusable
_JQ_HALT_MARK = "\ue000bkmcp-halt-"


class JqProgram:
    """A compiled ``--jq`` expression, via the ``jq`` binding or, failing that, a ``jq`` executable.

    ``halt_error`` is redefined (in front of the expression) as an error carrying a marker, its message and its
    status, because the binding reports jq's own ``halt_error`` as a silent end of output; so both back ends
    behave the same, as jq 1.7 does. A program that starts with ``import``/``include`` cannot take the prefix:
    it runs as given, and ``halt_error`` in it is refused at compile time.
    """

    def __init__(self, expression: str) -> None:
        self.expression = expression
        self._module = _load_jq_module()
        self._executable: str | None = None
        if not expression.strip():
            raise InvalidJqExpressionError("--jq expression is empty", hint="give a jq program, e.g. --jq '.data'")
        self._literal = False  # jq keeps number literals (jq >= 1.7 with decNumber)
        self._halt_mark = f"{_JQ_HALT_MARK}{os.urandom(4).hex()}:"
        defs = (
            'def halt_error($c): if ($c | type) != "number" then error("halt_error/1: number required") '
            f"else error({json.dumps(self._halt_mark)} + ({{m: ., c: $c}} | tojson)) end; "
            "def halt_error: halt_error(5); "
        )
        self._wrapped = True
        if self._module is not None:
            try:
                self._program = self._module.compile(expression)
            except ValueError as exc:
                raise InvalidJqExpressionError(
                    f"invalid --jq expression: {first_line(exc)}", hint=_JQ_SYNTAX_HINT
                ) from None
            self._literal = _jq_keeps_literals(self._module)
            try:  # each output as JSON text, so jq's own spelling of numbers reaches parse_json
                self._program = self._module.compile(f"{defs}({expression}\n) | tojson")
            except ValueError:  # e.g. a leading import/include directive: run as given, all output at once
                self._wrapped = False
            self._check_halt_error()
            return
        import shutil

        self._executable = shutil.which("jq")
        if self._executable is None:
            raise JqUnavailableError(
                "--jq needs the jq library, which has no build for this Python/platform, and no jq executable "
                "is on PATH",
                hint="install jq (e.g. apt install jq) or drop --jq and filter the JSON output yourself",
            )
        self._source = f"{defs}(\n{expression}\n)"
        if self._check_executable(f"{defs}if false then (\n{expression}\n) else empty end") is not None:
            self._wrapped = False
            self._source = f" {expression}"  # a leading "-" is no option
            problem = self._check_executable(f"if false then (\n{expression}\n) else empty end")
            if problem is not None:
                raise InvalidJqExpressionError(f"invalid --jq expression: {problem}", hint=_JQ_SYNTAX_HINT)
        self._check_halt_error()

    def _check_halt_error(self) -> None:
        if not self._wrapped and "halt_error" in self.expression:
            raise InvalidJqExpressionError(
                "--jq: halt_error cannot be used in a program that starts with import/include",
                hint="drop the module directive, or use error(...) instead of halt_error",
            )

    def _check_executable(self, program: str) -> str | None:
        """Compile ``program`` with the jq executable: None when it compiles, else jq's first line of error."""
        import subprocess

        assert self._executable is not None
        try:
            proc = subprocess.run(
                [self._executable, "-n", program],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                encoding="utf-8",
                errors="replace",
                timeout=JQ_EXECUTABLE_CHECK_SECONDS,
            )
        except subprocess.TimeoutExpired:
            raise JqUnavailableError(
                f"the jq executable {self._executable} did not compile the --jq expression within "
                f"{format_duration(JQ_EXECUTABLE_CHECK_SECONDS)}",
                hint="check that this jq works (jq --version), or drop --jq and filter the JSON output yourself",
            ) from None
        except OSError as exc:
            raise JqUnavailableError(
                f"the jq executable {self._executable} cannot be run: {exc.strerror or exc}",
                hint="install a working jq, or drop --jq",
            ) from None
        return None if proc.returncode == 0 else first_line(proc.stderr)

    def apply(self, envelope: dict[str, Any], deadline: Deadline | None = None) -> list[str]:
        """Every output value of ``stream`` at once."""
        return list(self.stream(envelope, deadline))

    def stream(self, envelope: dict[str, Any], deadline: Deadline | None = None, *, raw: bool = False) -> Iterator[str]:
        """Run over the final envelope; yield each output value as one compact JSON line as soon as jq has it
        (with ``raw``, a string value as its text, as ``jq -r`` prints it).

        ``deadline`` bounds the run: it is checked between output values (a ``jq`` executable is also killed when
        it is silent past it); past it the run is ``jq_error``. A ``halt_error`` raises ``JqHalt`` after the
        values before it; ``halt`` just ends the output.

        jq computes with doubles. jq >= 1.7 keeps the literal text of a number it did not compute with, which
        ``tojson`` reveals: that is the "literal" mode, used when the binding has it. Otherwise numbers a double
        cannot hold (big integers, ``1e400``) travel as marker strings and come back exact. Numbers jq would only
        re-spell (``1E+2``, ``-0.0`` without literals; ``1e400`` -> ``1E+400`` with them) are tried as markers
        too, in a second run side by side: each value of that run is used when it equals, value for value, the
        value computed with real numbers (so comparisons and arithmetic keep jq's meaning). A runtime error is
        ``jq_error``.
        """
        # The number walks are iterative (no recursion limit is raised: nothing process-wide changes per call);
        # the jq binding's own conversions still recurse, which is what this guards.
        try:
            for value in self._stream(envelope, deadline):
                yield render_raw_text(value) if raw and isinstance(value, str) else dump_json(value)
        except RecursionError:
            raise JqError(
                "--jq failed on the result: it is nested too deeply",
                data=envelope.get("data"),
                hint="project a smaller part (e.g. --jq '.data.result.content'), or drop --jq and save the output",
            ) from None

    def _stream(self, envelope: dict[str, Any], deadline: Deadline | None) -> Iterator[Any]:
        nonce = os.urandom(4).hex()
        if self._literal:
            exact_protect, text_protect = _jq_beyond_decimal, _jq_literal_differs
        else:
            exact_protect, text_protect = _jq_value_differs, _jq_text_differs
        data = envelope.get("data")
        dry = isinstance(data, dict) and data.get("dry_run") is True
        exact = self._project(envelope, nonce, exact_protect, deadline)
        respelled: Iterator[Any] | None = None
        if _any_number(envelope, lambda n: text_protect(n) and not exact_protect(n)):
            respelled = self._project(envelope, nonce, text_protect, deadline)
        try:
            for value in exact:
                if respelled is not None:
                    try:
                        other = next(respelled)
                    except (StopIteration, ValueError, JqHalt, _JqOverBudget):
                        other = respelled = None
                    if respelled is not None and _same_json(other, value):
                        value = other
                    else:  # once the runs part, the value computed with real numbers is the answer
                        _close(respelled)
                        respelled = None
                yield value
                if deadline is not None and deadline.left() <= 0:
                    raise _JqOverBudget()
        except (ValueError, _JqOverBudget) as exc:
            if isinstance(exc, _JqOverBudget):
                assert deadline is not None
                reason = f"--jq did not finish within the time --timeout left for it ({deadline.seconds:.1f}s)"
            else:
                reason = f"--jq failed on the result: {first_line(exc)}"
            raise JqError(
                reason,
                hint="nothing was sent (dry run); fix the expression"
                if dry
                else "the remote operation already "
                "happened; do not retry it blindly, fix the expression and re-run it on saved output (data keeps "
                "the unprojected result)",
                data=data,
            ) from None
        finally:
            _close(respelled)
            _close(exact)

    def _project(
        self, envelope: dict[str, Any], nonce: str, protect: Callable[[Any], bool], deadline: Deadline | None
    ) -> Iterator[Any]:
        table: list[str] = []
        text = dump_json(_jq_protect(envelope, table, nonce, protect))
        if self._executable is not None:
            texts: Iterable[str] = _jq_executable_lines([self._executable, "-c", self._source], text, deadline)
        elif self._wrapped:
            texts = iter(self._program.input_text(text))
        else:
            texts = self._program.input_text(text).text().split("\n")
        try:
            for item in texts:
                if not item.strip():
                    continue
                try:
                    value = parse_json(item, strict_keys=False)
                except JsonInputError:
                    raise ValueError(
                        "jq printed a value that is not JSON (jq cuts values nested over 256 levels)"
                    ) from None
                yield _jq_restore(value, table, nonce)
        except ValueError as exc:
            message = str(exc)
            at = message.find(self._halt_mark)
            if at < 0:
                raise
            self._halt(message[at + len(self._halt_mark) :].split("\n", 1)[0], table, nonce)
        finally:
            _close(texts)

    def _halt(self, record: str, table: list[str], nonce: str) -> None:
        """Raise ``JqHalt`` for a halt_error record ``{"m": message, "c": status}`` as jq 1.7 prints it."""
        halted = _jq_restore(parse_json(record, strict_keys=False), table, nonce)
        message, code = halted["m"], halted["c"]
        try:
            status = int(code) % 256
        except (TypeError, ValueError, OverflowError, decimal.DecimalException):  # nan arrives as null
            raise ValueError(f"halt_error/1: invalid exit status {short_text(code)}") from None
        raise JqHalt(message if isinstance(message, str) else dump_json(message) + "\n", status)


def _close(iterator: Any) -> None:
    """Close a generator (a jq executable behind it is killed); other iterables need nothing."""
    close = getattr(iterator, "close", None)
    if close is not None:
        close()


def _jq_executable_lines(argv: list[str], text: str, deadline: Deadline | None) -> Iterator[str]:
    """Run a jq executable on ``text``; yield its stdout lines as they come. ``ValueError`` with jq's error
    when it fails; ``_JqOverBudget`` (the process killed) when ``deadline`` passes first."""
    import selectors
    import subprocess

    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    except OSError as exc:
        raise ValueError(f"the jq executable cannot be run: {exc.strerror or exc}") from None
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    pending = memoryview(text.encode("utf-8"))
    out, err = bytearray(), bytearray()
    selector = selectors.DefaultSelector()
    try:
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(stream.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        while selector.get_map():
            wait = None if deadline is None else deadline.left()
            if wait is not None and wait <= 0:
                raise _JqOverBudget()
            for key, _events in selector.select(wait):
                if key.fileobj is proc.stdin:
                    try:
                        pending = pending[os.write(proc.stdin.fileno(), pending[:65536]) :]
                    except BrokenPipeError:
                        pending = pending[:0]
                    if not pending:
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    selector.unregister(key.fileobj)
                elif key.fileobj is proc.stderr:
                    err += chunk
                else:
                    out += chunk
                    *lines, rest = out.split(b"\n")
                    out = bytearray(rest)
                    for line in lines:
                        yield line.decode("utf-8", "replace")
        if out:
            yield out.decode("utf-8", "replace")
        if proc.wait() != 0:  # jq's error line (its debug/stderr output may come before it)
            messages = err.decode("utf-8", "replace").splitlines()
            errors = (
                [m for m in messages if _JQ_HALT_MARK in m]
                or [m for m in messages if m.startswith("jq: error")]
                or messages
            )
            raise ValueError(errors[0] if errors else f"the jq executable exited with status {proc.returncode}")
    finally:
        selector.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


_JQ_LITERALS: dict[int, bool] = {}


def _jq_keeps_literals(module: Any) -> bool:
    """Whether this jq keeps number literals (built with decNumber), probed once per process."""
    if id(module) not in _JQ_LITERALS:
        probe = "100000000000000000001"
        try:
            _JQ_LITERALS[id(module)] = module.compile("tojson").input_text(probe).all() == [probe]
        except Exception:  # any surprise from the binding just means: no literal mode
            _JQ_LITERALS[id(module)] = False
    return _JQ_LITERALS[id(module)]


def first_line(error: object) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "unknown error"


def _jq_value_differs(number: Any) -> bool:
    """True when a double cannot hold ``number`` exactly (jq would change its value)."""
    if isinstance(number, bool):
        return False
    if isinstance(number, int):
        return abs(number) > _DOUBLE_EXACT
    if isinstance(number, decimal.Decimal):
        try:
            as_float = float(number)
        except (OverflowError, ValueError):
            return True
        if as_float in (float("inf"), float("-inf")) or as_float != as_float:
            return True
        return decimal.Decimal(repr(as_float)) != number
    return False


def _jq_text_differs(number: Any) -> bool:
    """True when jq would print ``number`` differently from its JSON text (value change or re-spelling)."""
    if _jq_value_differs(number):
        return True
    if isinstance(number, JsonNumber):
        # jq prints the shortest round-trip form, like repr(float), but integral values without ".0"
        text = number.text
        return text != repr(float(text)) or "e" in text or text.endswith(".0")
    return False


def _jq_beyond_decimal(number: Any) -> bool:
    """With literal-keeping jq: True for exponents its decNumber cannot hold (they would become doubles)."""
    return isinstance(number, decimal.Decimal) and (not number.is_finite() or abs(number.adjusted()) > 999_999_000)


def _jq_literal_differs(number: Any) -> bool:
    """With literal-keeping jq: True when it would re-spell the literal (``1e400`` -> ``1E+400``)."""
    if _jq_beyond_decimal(number):
        return True
    return isinstance(number, JsonNumber) and str(decimal.Decimal(number.text)) != number.text


def _any_number(value: Any, predicate: Callable[[Any], bool]) -> bool:
    stack = [value]
    while stack:  # an explicit stack: any depth parse_json accepted, without touching the recursion limit
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, (int, decimal.Decimal)) and not isinstance(item, bool) and predicate(item):
            return True
    return False


def _same_json(a: Any, b: Any) -> bool:
    """JSON equality: numbers by value, but never a number equal to a boolean or a string."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if isinstance(x, bool) or isinstance(y, bool):
            if not (type(x) is type(y) and x == y):
                return False
        elif isinstance(x, (int, decimal.Decimal)) and isinstance(y, (int, decimal.Decimal)):
            if not x == y:
                return False
        elif isinstance(x, list) and isinstance(y, list):
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif isinstance(x, dict) and isinstance(y, dict):
            if list(x) != list(y):
                return False
            stack.extend((x[k], y[k]) for k in x)
        elif not (type(x) is type(y) and x == y):
            return False
    return True


def _json_map(value: Any, leaf: Callable[[Any], Any], key: Callable[[str], str] | None = None) -> Any:
    """``value`` rebuilt with ``leaf`` applied to every scalar (and ``key`` to every object key), depth first in
    document order, with an explicit stack instead of recursion (no recursion limit to raise)."""
    if not isinstance(value, (dict, list)):
        return leaf(value)
    result: Any = {} if isinstance(value, dict) else []
    stack: list[tuple[Any, Any]] = [(iter(value.items()) if isinstance(value, dict) else iter(value), result)]
    while stack:
        items, out = stack[-1]
        for item in items:
            if type(out) is dict:
                name, child = item
                if key is not None:
                    name = key(name)
            else:
                child = item
            nested = isinstance(child, (dict, list))
            built: Any = ({} if isinstance(child, dict) else []) if nested else leaf(child)
            if type(out) is dict:
                out[name] = built
            else:
                out.append(built)
            if nested:
                stack.append((iter(child.items()) if isinstance(child, dict) else iter(child), built))
                break
        else:
            stack.pop()
    return result


def _jq_protect(value: Any, table: list[str], nonce: str, protect: Callable[[Any], bool] = _jq_value_differs) -> Any:
    """Replace the numbers ``protect`` selects with marker strings, so jq moves them without touching them."""

    def leaf(item: Any) -> Any:
        if not isinstance(item, (str, bool)) and item is not None and protect(item):
            table.append(item.text if isinstance(item, JsonNumber) else str(item))
            return f"{_JQ_MARK}{nonce}-{len(table) - 1}\ue001"
        return item

    return _json_map(value, leaf)


def _jq_restore(value: Any, table: list[str], nonce: str) -> Any:
    marker = re.compile(re.escape(_JQ_MARK + nonce) + r"-(\d+)\ue001")

    def leaf(item: Any) -> Any:
        if isinstance(item, str) and _JQ_MARK in item:
            whole = marker.fullmatch(item)
            if whole:
                text = table[int(whole.group(1))]
                return int(text) if re.fullmatch(r"-?\d+", text) and len(text) <= INT_DIGITS_LIMIT else JsonNumber(text)
            return marker.sub(lambda m: table[int(m.group(1))], item)
        return item

    return _json_map(value, leaf, leaf)


def compile_jq(expression: str) -> JqProgram:
    return JqProgram(expression)


# -- 9.3 --raw: a result as plain text (docs/contract.md §7) -----------------------------------------------------------


def render_raw_result(result: Mapping[str, Any], *, pretty: bool = False, terminal: bool = False) -> str:
    """A successful call's result as ``--raw`` prints it: each ``text`` block as it is, followed by a newline
    unless it ends with one; any other block as one bracketed line naming it, never its bytes; no block but a
    ``structuredContent``: that value as JSON. Lone surrogates (valid in JSON, not in UTF-8) become U+FFFD; for
    a ``terminal``, controls are shown as escapes (``render_raw_text``)."""
    content = result.get("content")
    blocks = content if isinstance(content, list) else []
    if not blocks and "structuredContent" in result:
        return render_raw_text(dump_json(result["structuredContent"], indent=2 if pretty else None), terminal) + "\n"
    return "".join(_raw_block(block, terminal) for block in blocks)


def render_raw_data(data: Mapping[str, Any], *, pretty: bool = False, terminal: bool = False) -> str:
    """What ``--raw`` prints of a command's data: a tool call's result (``render_raw_result``), a read resource's
    contents (each text as it is, a blob as one bracketed line) or a prompt's messages (one block per message,
    headed by its role) or a skill's files (each text under its ``[path]``, any other as one bracketed line); for a
    ``terminal``, controls shown as escapes (``render_raw_text``)."""
    if "files" in data:
        blocks = []
        for file in data["files"]:
            if isinstance(file.get("text"), str):
                text = render_raw_text(file["text"], terminal)
                blocks.append(printable(f"[{file['path']}]") + "\n" + (text if text.endswith("\n") else text + "\n"))
            else:
                saved = f", saved as {file['file']}" if "file" in file else ""
                blocks.append(
                    printable(f"[{file['path']}, {file.get('mimeType')}, {file['bytes']} bytes{saved}]") + "\n"
                )
        return "\n".join(blocks)
    result = data["result"]
    if "uri" in data:
        contents = result.get("contents")
        return "".join(_raw_block({"type": "resource", "resource": item}, terminal) for item in contents or [])
    if "prompt" in data:
        blocks = []
        for message in result.get("messages") or []:
            message = message if isinstance(message, dict) else {}
            content = message.get("content")
            blocks_of = content if isinstance(content, list) else [content]
            body = "".join(_raw_block(block, terminal) for block in blocks_of)
            blocks.append(printable(f"[{message.get('role')}]") + "\n" + body)
        return "\n".join(blocks)
    return render_raw_result(result, pretty=pretty, terminal=terminal)


def _raw_block(block: Any, terminal: bool = False) -> str:
    """One content block as ``--raw`` prints it: a ``text`` block or an embedded text resource as its text (with a
    final newline), anything else as its bracketed line."""
    inner = block.get("resource") if isinstance(block, dict) and block.get("type") == "resource" else block
    if isinstance(block, dict) and block.get("type") in ("text", "resource") and isinstance(inner, dict):
        if isinstance(inner.get("text"), str):
            text = render_raw_text(inner["text"], terminal)
            return text if text.endswith("\n") else text + "\n"
    return _raw_block_line(block) + "\n"


def render_raw_text(text: str, terminal: bool = False) -> str:
    """The one renderer of a server's text for stdout (``--raw``, ``--jq``'s strings, an envelope's JSON): as a
    UTF-8 stream can carry it, lone surrogates become U+FFFD. For a ``terminal`` (docs/contract.md §7), every
    character a terminal would act on (C0 controls but newline, tab and the carriage return of a CRLF; DEL; C1
    controls) is shown as its JSON escape (``\\u001b``, ``\\r``, ``\\u009b``), so a tool's text can neither
    write the clipboard (OSC 52), set the title, clear the screen, nor hide a link. JSON text stays valid JSON:
    such characters only occur inside its strings, where the escape means the same character. Piped, nothing
    else changes: the bytes are exact."""
    text = _LONE_SURROGATE.sub("\ufffd", text)
    if terminal and _TERMINAL_CONTROL.search(text):
        text = _TERMINAL_CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text)
    return text


_LONE_SURROGATE = lazy_re("[\ud800-\udfff]")
_TERMINAL_CONTROL = lazy_re("\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _raw_block_line(block: Any) -> str:
    """``[image image/png, 3412 bytes]``, ``[resource file:///a.txt, text/plain]``, ``[resource_link …]``: what the
    block is, on one line, its text made printable; a block of unknown shape is ``[unknown block]``."""
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        return "[unknown block]"
    kind = block["type"]
    inner = block["resource"] if kind == "resource" and isinstance(block.get("resource"), dict) else block
    parts = [inner[key] for key in ("uri", "mimeType") if isinstance(inner.get(key), str) and inner[key]]
    payload = inner.get("data", inner.get("blob"))
    if isinstance(payload, str):
        chars = sum(1 for ch in payload if not ch.isspace() and ch != "=")  # base64: whitespace, padding: no data
        parts.append(f"{chars * 3 // 4} bytes")  # the decoded size, without decoding it
    elif isinstance(payload, dict) and isinstance(payload.get("bytes"), int):  # written by --out (section 9.7)
        parts.append(f"{payload['bytes']} bytes")
        if isinstance(payload.get("path"), str):
            parts.append(f"saved as {payload['path']}")
    elif kind == "resource" and isinstance(inner.get("text"), str):
        parts.append(f"{len(inner['text'].encode('utf-8', 'surrogatepass'))} bytes")
    line = kind + (" " + ", ".join(parts) if parts else "")
    if len(line) > _RAW_LINE_LIMIT:
        line = line[: _RAW_LINE_LIMIT - 1] + "…"
    return printable(f"[{line}]")


_RAW_LINE_LIMIT = 300  # characters of a bracketed line: a URI is shown, a data: URI never in full


TOOL_REASON_LIMIT = 200  # characters of a tool's own reason that mcp_tool_error's message quotes


def render_tool_reason(result: Mapping[str, Any], scrub: Callable[[str], str]) -> str | None:
    """Why an ``isError`` result failed, as the tool put it: the first non-blank line of its text blocks, scrubbed
    of secrets before it is cut to ``TOOL_REASON_LIMIT`` characters (a cut must not split a secret out of reach
    of the scrub), control characters shown as escapes. None when no text block says anything."""
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str):
            line = next((line.strip() for line in block["text"].splitlines() if line.strip()), "")
            if line:
                line = printable(scrub(line))
                return line if len(line) <= TOOL_REASON_LIMIT else line[: TOOL_REASON_LIMIT - 1] + "…"
    return None


# -- 9.4 help text: the root and resident help -------------------------------------------------------------------------

ROOT_HELP = """\
bkmcp {version} - command-line MCP client: check servers, discover tools, call them.

Usage:
  bkmcp [GLOBAL...] <server> [-h | --help]             static server help (no network)
  bkmcp [GLOBAL...] <server> --check                   config + connection + protocol + full discovery
  bkmcp [GLOBAL...] <server> --tools                   complete tool catalogue as JSON
  bkmcp [GLOBAL...] <server> --tools --brief           compact: name, first line, flags per tool (start here)
  bkmcp [GLOBAL...] <server> <tool> --help             discover the tool's schema and show its flags
  bkmcp [GLOBAL...] <server> <tool> [--<param> VALUE...]   validate and call the tool once
  bkmcp [GLOBAL...] <server> <tool> --body JSON|@FILE|-    call with a complete arguments object
  bkmcp [GLOBAL...] <server> <tool> --body ... --dry-run   offline preview, zero network
  bkmcp [GLOBAL...] <server> --resources [--brief]     every resource and resource template as JSON
  bkmcp [GLOBAL...] <server> --read URI                read one resource (a template: --VAR VALUE per variable)
  bkmcp [GLOBAL...] <server> --prompts                 every prompt as JSON
  bkmcp [GLOBAL...] <server> --prompt NAME [--ARG VALUE...]   get one prompt (--help: its arguments)
  bkmcp [GLOBAL...] <server> <tool> ... --task | --detach      run the call as a task: wait, or print its handle
  bkmcp [GLOBAL...] <server> --task-status ID | --task-result ID [--wait] | --task-cancel ID | --tasks
  bkmcp [GLOBAL...] <server> --skills                  every skill (SEP-2640) as JSON; no file is read
  bkmcp [GLOBAL...] <server> --skill NAME [--out DIR]  load a skill: every file read and verified (digest, size,
                                                       frontmatter), else nothing printed but skill_unverified
  bkmcp [GLOBAL...] <server> --resume ID --input FIELD=VALUE   answer a question a call stopped at (data.resume)

When the server asks a question (elicitation; a call, --read or --prompt stopped with input_required):
  --input FIELD=VALUE  an answer, typed by the question's schema as tool flags are (repeatable)
  --inputs JSON|@FILE|-  answers as an object by field (or by question key); '{{}}' accepts the defaults
  --input-action decline|cancel  refuse instead (decline only when you mean no)
  On a terminal bkmcp asks each field and shows the answers before sending; elsewhere, without answers, it stops
  with error input_required (the questions in data.input_requests, a handle in data.resume).

Other modes (bkmcp --resident --help; docs/resident.md):
  bkmcp --resident --registry SOURCE [...]     resident multi-server mode for agent platforms (JSON lines)
  bkmcp --registry FILE --import mcp.json      copy a config's servers into a SQLite registry
  bkmcp --registry FILE --list                 a registry's servers as JSON, never a credential
  bkmcp --completion bash|zsh|fish             shell completion: options and configured server names
  bkmcp --sessions [--stop]                    the --keep-alive sessions (docs/warm-sessions.md); --stop ends them

Global options (before or after <server>):
  --config PATH        config file (default: $BK_CLI_CONFIG_DIR/mcp.json, else ~/.bk-cli/mcp.json)
  --timeout DURATION   budget for the whole remote operation: 500ms, 30s, 2m, 1h (default 60s)
  --jq EXPR            project the final JSON envelope with a jq expression (one value per line)
  -r, --raw            a call's result as plain text (text blocks as they are); with --jq, strings unquoted
  --out DIR|-          --read, --prompt, --skill, a tool call: each blob (image, audio, resource blob) to a new
                       file in DIR (made if missing; never overwritten, never through a link), its base64 replaced
                       by {{path, bytes, sha256, mimeType}}; --out - : the one blob's bytes on stdout. Without it:
                       nothing is written
  --max-blob-bytes N   with --out: the largest blob written (default {max_blob_bytes}, 64 MiB); larger: nothing written
  -v, --verbose        diagnostics on stderr (requests, eras, timing); secrets print as ***
  --insecure           skip TLS certificate verification
  --keep-alive[=DUR]   keep the server's session warm in a background process for the next calls (default 10m;
                       also BKMCP_KEEP_ALIVE=DUR; the server's state is kept between calls)
  -h, --help           show help (never calls a tool, never reads --body input)
  --version            print the version

{config}

Config file (strict JSON, one file, never merged; every field: docs/user-guide.md#configuration), e.g.
{config_example}

Output: one JSON envelope on stdout, {{"ok": true, "data": …}} or {{"ok": false, "error": {{"code", …}}}}.
Exit status: 0 success or help; 1 local/usage error (envelope on stderr); 2 remote error (envelope on
stdout); 130 interrupted.

Examples:
  bkmcp report-prod --check
  bkmcp report-prod --tools --jq '.data.tools[].name'
  bkmcp report-prod search_reports --help
  bkmcp report-prod search_reports --keyword 'gateway error' --limit 20
  bkmcp report-prod search_reports --body '{{"keyword": "gateway error", "limit": 20}}'
  bkmcp report-prod search_reports --body @params.json --dry-run
  bkmcp --config ./.mcp.json report-prod --tools
"""


def render_root_help(
    config_path: str, servers: Sequence[str] | None = None, problem: str | None = None, *, given: bool = False
) -> str:
    """The root help; ``servers`` are the configured names (None: the file is missing, or ``problem`` says why it
    cannot be read); ``given``: the file came from ``--config``, which the examples then carry. Reading the file is
    the caller's (no request, no environment variable)."""
    if problem is not None:
        config = f"Config file: {config_path} (invalid: {problem})"
    elif servers is None:
        config = (
            f"Config file: {config_path} (not found; bkmcp reads --config PATH, else $BK_CLI_CONFIG_DIR/mcp.json, "
            "else ~/.bk-cli/mcp.json)"
        )
    else:
        config = f"Config file: {config_path}\nConfigured servers ({len(servers)}): {', '.join(servers) or '(none)'}"
    example = "\n".join("  " + line for line in CONFIG_EXAMPLE_LINES)
    text = ROOT_HELP.format(version=__version__, config=config, config_example=example, max_blob_bytes=MAX_BLOB_BYTES)
    if given:  # the examples carry the --config this help was run with (docs/contract.md §2)
        text = text.replace("\n  bkmcp report-prod ", f"\n  {build_server_command('report-prod', config_path)} ")
    return text


RESIDENT_HELP = """\
bkmcp --resident - resident multi-server mode for agent platforms (docs/resident.md)

Usage:
  bkmcp --resident --registry SOURCE [--events FILE|-] [--max-processes N] [--max-user-processes N]
                   [--idle-timeout DURATION] [--shutdown-grace DURATION] [--timeout DURATION]
                   [--inject-resource-tools] [--max-blob-bytes N] [--elicitation off|forward]
                   [--input-timeout DURATION] [-v] [--insecure]
  bkmcp --registry FILE --import mcp.json      add or replace mcp.json's servers in a SQLite registry
  bkmcp --registry FILE --list                 the registry's servers as JSON, never a credential

Options:
  --registry SOURCE        a SQLite file (created when missing) or http(s)://.../internal/mcp/config
  --events FILE|-          append one JSON line per event (- for stderr)
  --max-processes N        live child processes in all (default {max_processes})
  --max-user-processes N   live child processes per user (default {max_user_processes})
  --idle-timeout DURATION  close a user's idle session after this long (default {idle_timeout})
  --shutdown-grace DURATION  at shutdown, time commands in flight get to finish (default {shutdown_grace}; 0: none)
  --timeout DURATION       budget of one call without its own timeout_ms (default 60s)
  --inject-resource-tools  list_tools adds a resource-reading tool for each server that declares resources
  --max-blob-bytes N       read_resource with include_blobs: the largest blob answered (default {max_blob_bytes})
  --elicitation off|forward  forward: a server's questions are answered input_required for the platform to answer
                           with resume and input_responses (default off: nothing is declared, questions declined)
  --input-timeout DURATION  how long a forwarded question waits for its answer (default {input_timeout})

One JSON command per line on stdin, one answer per line on stdout (matched by task_id), e.g.
  {{"command": "invoke", "task_id": "t-1", "params": {{"action": "list_tools"}}, "user": {{"userId": "u1"}}}}
Actions: init, list_servers, connect_server, disconnect_server, list_tools, refresh_tools, call_tool,
list_resources, read_resource, list_prompts, get_prompt, list_skills, read_skill, shutdown.
Exit status: 0 after shutdown, end of input or SIGTERM; 130 after SIGINT; 1 when the registry cannot be opened.
Command protocol: docs/resident.md; registry and credentials: docs/resident-registry.md.
"""
# The resident mode's defaults, as its help prints them; section 10 (which the pyz runs only on first use) holds
# the values, and tests/unit/test_cli.py checks that the two agree.
RESIDENT_HELP_DEFAULTS = {
    "max_processes": 64,
    "max_user_processes": 8,
    "idle_timeout": "10m",
    "shutdown_grace": "5s",
    "max_blob_bytes": 67108864,
    "input_timeout": "5m",
}


def render_resident_help() -> str:
    return RESIDENT_HELP.format(**RESIDENT_HELP_DEFAULTS)


# Shell completion (``bkmcp --completion bash|zsh|fish``): options, server names that the script asks
# ``bkmcp [--config PATH] --completion servers`` for (the config file only), after a server its tool names and after
# a tool that tool's flags, which it asks ``--completion tools SERVER`` and ``--completion flags SERVER TOOL`` for:
# a live warm session's catalogue, else one connect bounded by ``COMPLETION_TIMEOUT`` (docs/contract.md §2). Never
# file names where a server, tool or flag goes; only the options valid at each position.


# -- 9.5 shell completion: the bash, zsh and fish scripts and the words they ask for -----------------------------------

COMPLETION_SHELLS = ("bash", "zsh", "fish")
# what the scripts ask for (hidden: --help names only the shells); docs/contract.md §2
COMPLETION_SERVER_WORDS = ("tools", "flags", "prompts", "resources", "values")  # the words that ask a server
COMPLETION_WORDS = ("servers", *COMPLETION_SERVER_WORDS)
COMPLETION_TIMEOUT = 2.0  # seconds one completion may spend connecting to a server for its tools
_COMPLETION_OPTIONS = (
    "--help --version --config --timeout --jq --raw --verbose --insecure --check --tools --brief --body --dry-run "
    "--resident --registry --import --list --completion --events --max-processes --max-user-processes --idle-timeout "
    "--shutdown-grace --max-blob-bytes --elicitation --input-timeout --inject-resource-tools --keep-alive --sessions "
    "--stop --resources --read --prompts --prompt --input --inputs --input-action --resume --out --task --detach"
)
# the options valid after <server> (before a tool), and after <server> <tool> beside the tool's own flags
_COMPLETION_SERVER_OPTIONS = (
    "--check --tools --brief --help --config --timeout --jq --raw --verbose --insecure --keep-alive "
    "--resources --read --prompts --prompt --resume"
)
_COMPLETION_CALL_OPTIONS = (
    "--body --dry-run --help --config --timeout --jq --raw --verbose --insecure --keep-alive --input --inputs "
    "--input-action"
)
# after --read URI or --prompt NAME, beside the template's variables or the prompt's arguments
_COMPLETION_TARGET_OPTIONS = (
    "--help --config --timeout --jq --raw --verbose --insecure --keep-alive --input --inputs --input-action"
)
_COMPLETION_VALUE_OPTIONS = (
    "--config --timeout --jq --body --registry --import --events --max-processes --max-user-processes "
    "--idle-timeout --shutdown-grace --max-blob-bytes --elicitation --input-timeout --completion --inputs "
    "--input-action --resume --out"
)
_COMPLETION_FLAG_OPTIONS = "--raw -r --verbose -v --insecure --dry-run --help -h --keep-alive"  # (no value)
_COMPLETION_FILE_OPTIONS = ("--config", "--body", "--registry", "--import", "--events")  # a file name as value
_BASH_COMPLETION = """\
# bkmcp completion for bash: eval "$(bkmcp --completion bash)" in ~/.bashrc, or save it as
# ~/.local/share/bash-completion/completions/bkmcp. Server names come from the config file (offline); tool names
# and a tool's flags from the server (a warm session's catalogue, else one connect of at most 2 s).
_bkmcp_offer() {{  # the lines of $1 that start with $cur, taken as they are: what bkmcp prints is never expanded
    local word
    while IFS= read -r word; do
        [[ -n $word && $word == "$cur"* ]] && COMPREPLY+=("$word")
    done <<<"$1"
}}
_bkmcp_offer_split() {{  # _bkmcp_offer for a word bash split at ':' (a URI): $full is the whole word typed,
    # $cur its part bash replaces; a word bkmcp quoted ('…') matches without its quote and only where bash
    # replaces the whole word
    local word keep=${{full%"$cur"}} typed=${{full#[\\'\\"]}}
    while IFS= read -r word; do
        [[ -n $word && ${{word#\\'}} == "$typed"* ]] || continue
        [[ $word == \\'* && -n $keep ]] && continue
        COMPREPLY+=("${{word#"$keep"}}")
    done <<<"$1"
}}
_bkmcp_target() {{  # after <server> --read URI|TEMPLATE or --prompt NAME: URIs, prompt names, flags, values
    local -a line=() rest=() args=()
    local before="${{COMP_LINE:0:$COMP_POINT}}" full="" server="" mode="" target="" pending="" skip="" j w
    # the words split at blanks only (COMP_WORDS is split at ':' too); zsh runs this through bashcompinit
    if [[ -n ${{ZSH_VERSION-}} ]]; then read -rA rest <<<"$before"; else read -ra rest <<<"$before"; fi
    for w in "${{rest[@]}}"; do [[ -z $w ]] || line+=("$w"); done  # (zsh's read keeps an empty last word)
    rest=()
    if [[ -n $before && $before != *[[:space:]] ]]; then
        full=${{line[${{#line[@]}}-1]}}; line=("${{line[@]:0:${{#line[@]}}-1}}")
    fi
    for (( j = 1; j < ${{#line[@]}}; j++ )); do
        w=${{line[j]}}
        if [[ -n $mode ]]; then rest+=("$w"); continue; fi
        case " {value_options} " in *" $w "*) (( j += 1 )); continue ;; esac
        case "$w" in
            --read|--prompt) [[ -n $server ]] || return 1; mode=$w; (( j += 1 ))
                (( j < ${{#line[@]}} )) || {{ pending=target; break; }}
                target=${{line[j]}}; target=${{target#[\\'\\"]}}; target=${{target%[\\'\\"]}} ;;
            --read=*|--prompt=*) [[ -n $server ]] || return 1; mode=${{w%%=*}}; target=${{w#*=}}
                target=${{target#[\\'\\"]}}; target=${{target%[\\'\\"]}} ;;
            -*) ;;
            *) [[ -z $server ]] || return 1; server=$w ;;  # a tool name: not a --read or --prompt line
        esac
    done
    [[ -n $mode ]] || return 1
    COMPREPLY=()
    if [[ $pending == target ]]; then
        [[ $mode == --read ]] && w=resources || w=prompts
        _bkmcp_offer_split "$(command {command} "${{config[@]}}" --completion $w "$server" 2>/dev/null)"
        return 0
    fi
    for w in "${{rest[@]}}"; do
        if [[ -n $skip ]]; then skip=""; continue; fi
        if [[ -n $pending ]]; then args+=("$pending" "$w"); pending=""; continue; fi
        case " {value_options} " in *" $w "*) skip=1; continue ;; esac
        case " {flag_options} " in *" $w "*) continue ;; esac
        case "$w" in --config=*|--timeout=*|--jq=*|--keep-alive=*) ;; --*=*) args+=("$w") ;; --*) pending=$w ;; esac
    done
    if [[ -n $pending && -z $skip && $full != -* ]]; then  # the value of a variable or argument: the server's
        _bkmcp_offer_split "$(command {command} "${{config[@]}}" --completion values "$server" $mode "$target" \\
            "${{args[@]}}" "$pending" "${{full#[\\'\\"]}}" 2>/dev/null)"
    elif [[ -z $skip ]]; then
        COMPREPLY=($(compgen -W "{target_options}" -- "$cur"))
        _bkmcp_offer "$(command {command} "${{config[@]}}" --completion flags "$server" $mode "$target" 2>/dev/null)"
    fi
    return 0
}}
_bkmcp() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}" word
    local -a config=() positional=()
    local i=1
    while (( i < COMP_CWORD )); do
        word="${{COMP_WORDS[i]}}"
        if [[ ${{COMP_WORDS[i+1]}} == = ]]; then  # bash splits --name=VALUE at the '=' (COMP_WORDBREAKS)
            [[ $word == --config ]] && config=(--config "${{COMP_WORDS[i+2]}}")
            (( i += 3 )); continue
        fi
        case " {value_options} " in
            *" $word "*) [[ $word == --config ]] && config=(--config "${{COMP_WORDS[i+1]}}"); (( i += 2 )); continue ;;
        esac
        case "$word" in
            --config=*) config=("$word") ;;
            -*) ;;
            *) positional+=("$word") ;;
        esac
        (( i += 1 ))
    done
    [[ $prev == = ]] && prev="${{COMP_WORDS[COMP_CWORD-2]}}="
    case "$prev" in
        --completion) COMPREPLY=($(compgen -W "{shells}" -- "$cur")); return ;;
        --config|--body|--registry|--import|--events|--config=|--body=|--registry=|--import=|--events=)
            type compopt >/dev/null 2>&1 && compopt -o filenames
            COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --timeout|--jq|--max-processes|--max-user-processes|--idle-timeout|--shutdown-grace|*=) COMPREPLY=(); return ;;
    esac
    if (( ${{#positional[@]}} > 0 )) && _bkmcp_target; then return; fi
    if (( ${{#positional[@]}} == 0 )); then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "{options}" -- "$cur"))
        else
            COMPREPLY=(); _bkmcp_offer "$(command {command} "${{config[@]}}" --completion servers 2>/dev/null)"
        fi
    elif (( ${{#positional[@]}} == 1 )); then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "{server_options}" -- "$cur"))
        else
            COMPREPLY=()
            _bkmcp_offer "$(command {command} "${{config[@]}}" --completion tools "${{positional[0]}}" 2>/dev/null)"
        fi
    elif [[ $prev == -* && $prev != *=* && " {flag_options} " != *" $prev "* && $cur != -* ]]; then
        COMPREPLY=()  # the value of a tool's flag
    else
        COMPREPLY=($(compgen -W "{call_options}" -- "$cur"))
        _bkmcp_offer "$(command {command} "${{config[@]}}" --completion flags "${{positional[0]}}" \\
            "${{positional[1]}}" 2>/dev/null)"
    fi
}}
complete -F _bkmcp bkmcp
"""
_ZSH_COMPLETION = """\
#compdef bkmcp
# bkmcp completion for zsh: save as _bkmcp in a directory of $fpath, or eval "$(bkmcp --completion zsh)" in
# ~/.zshrc after compinit. It runs the bash completion through bashcompinit.
autoload -U +X bashcompinit && bashcompinit
{bash}"""
_FISH_COMPLETION = """\
# bkmcp completion for fish: bkmcp --completion fish > ~/.config/fish/completions/bkmcp.fish
# Server names come from the config file (offline); tool names, a tool's flags, prompt names, resource URIs and
# templates, their flags and the values of completion/complete from the server (a warm session, else one connect
# of at most 2 s). fish escapes every word it inserts, so what bkmcp prints is never expanded or run.
function __bkmcp_no_server
    set -l words (commandline -opc)
    set -l value_options {value_options}
    set -l i 2
    while test $i -le (count $words)
        if contains -- $words[$i] $value_options
            set i (math $i + 2)
            continue
        end
        string match -q -- '-*' $words[$i]; or return 1
        set i (math $i + 1)
    end
    return 0
end
function __bkmcp_takes --argument-names option  # the value of OPTION is being typed (--OPTION VALUE, --OPTION=VALUE)
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    test "$words[-1]" = $option; or string match -q -- "$option=*" "$cur"
end
function __bkmcp_option --argument-names option  # an option offered before <server>, or its value being typed
    __bkmcp_no_server; or __bkmcp_takes $option
end
function __bkmcp_words  # servers; after one its tools, a tool's flags; after --read/--prompt URIs, names, flags, values
    set -l words (commandline -opc)
    set -l cur (commandline -ct)
    set -l typed (string unescape -- "$cur"; or printf '%s\\n' "$cur")
    set -l unquote "^'(.*)'\\$"  # a word bkmcp quoted ('...') is offered without its quotes: fish escapes it
    set -l value_options {value_options}
    set -l flag_options {flag_options}
    set -l config
    set -l positional
    set -l mode
    set -l target
    set -l rest
    set -l i 2
    while test $i -le (count $words)
        set -l w $words[$i]
        set i (math $i + 1)
        if test -n "$mode"
            set -a rest $w
        else if contains -- $w $value_options
            test $w = --config; and set config --config $words[$i]
            set i (math $i + 1)
        else if contains -- $w --read --prompt; and test (count $positional) -eq 1
            set mode $w
            set target $words[$i]  # none yet: the URI or name is being typed
            set i (math $i + 1)
        else if string match -qr -- '^--(read|prompt)=' $w; and test (count $positional) -eq 1
            set mode (string replace -r -- '=.*' '' $w)
            set target (string replace -r -- '^[^=]*=' '' $w)
        else if string match -q -- '--config=*' $w
            set config $w
        else if not string match -q -- '-*' $w
            set -a positional $w
        end
    end
    set -l server $positional[1]
    if test -z "$server"
        string match -q -- '-*' "$cur"; and return  # the options' own lines offer them
        command {command} $config --completion servers 2>/dev/null
    else if test -n "$mode"; and test (count $target) -eq 0
        set -l word prompts
        test $mode = --read; and set word resources
        command {command} $config --completion $word $server 2>/dev/null | string replace -r -- $unquote '$1'
    else if test -n "$mode"
        set -l args
        set -l pending
        set -l skip
        for w in $rest
            if test -n "$skip"
                set skip
            else if test -n "$pending"
                set -a args $pending $w
                set pending
            else if contains -- $w $value_options
                set skip 1
            else if contains -- $w $flag_options
            else if string match -qr -- '^--(config|timeout|jq|keep-alive)=' $w
            else if string match -q -- '--*=*' $w
                set -a args $w
            else if string match -q -- '--*' $w
                set pending $w
            end
        end
        if test -n "$pending"; and not string match -q -- '-*' "$cur"  # the server's values for that flag
            command {command} $config --completion values $server $mode $target $args $pending "$typed" \\
                2>/dev/null | string replace -r -- $unquote '$1'
        else if test -z "$skip"
            printf '%s\\n' {target_options}
            command {command} $config --completion flags $server $mode $target 2>/dev/null
        end
    else if test (count $positional) -eq 1
        if string match -q -- '-*' "$cur"
            printf '%s\\n' {server_options}
        else
            command {command} $config --completion tools $server 2>/dev/null
        end
    else if string match -q -- '-*' "$words[-1]"; and not string match -q -- '*=*' "$words[-1]"
        and not contains -- $words[-1] $flag_options; and not string match -q -- '-*' "$cur"
        return  # the value of a tool's flag
    else
        printf '%s\\n' {call_options}
        command {command} $config --completion flags $server $positional[2] 2>/dev/null
    end
end
complete -c bkmcp -f
complete -c bkmcp -a '(__bkmcp_words)'
{options}"""


def render_completion(shell: str, command: Sequence[str]) -> str:
    """The completion script for ``shell``; ``command`` is how the script runs bkmcp for server names."""
    quoted = " ".join("'" + part.replace("'", "'\\''") + "'" for part in command)
    bash = _BASH_COMPLETION.format(
        value_options=_COMPLETION_VALUE_OPTIONS,
        shells=" ".join(COMPLETION_SHELLS),
        options=_COMPLETION_OPTIONS + " -h -v",
        server_options=_COMPLETION_SERVER_OPTIONS,
        call_options=_COMPLETION_CALL_OPTIONS,
        target_options=_COMPLETION_TARGET_OPTIONS,
        flag_options=_COMPLETION_FLAG_OPTIONS,
        command=quoted,
    )
    if shell == "bash":
        return bash
    if shell == "zsh":
        return _ZSH_COMPLETION.format(bash=bash)
    return _FISH_COMPLETION.format(
        value_options=_COMPLETION_VALUE_OPTIONS,
        flag_options=_COMPLETION_FLAG_OPTIONS,
        server_options=_COMPLETION_SERVER_OPTIONS,
        call_options=_COMPLETION_CALL_OPTIONS,
        target_options=_COMPLETION_TARGET_OPTIONS,
        command=quoted,
        options="".join(map(_render_fish_option, _COMPLETION_OPTIONS.split())),
    )


def _render_fish_option(name: str) -> str:
    """The fish line offering ``name`` before <server>: an option taking a value also where that value is typed
    (fish then completes the value by this line: a file, a shell, or nothing)."""
    if name not in _COMPLETION_VALUE_OPTIONS.split():
        return f"complete -c bkmcp -n __bkmcp_no_server -l {name[2:]}\n"
    value = "-r -F" if name in _COMPLETION_FILE_OPTIONS else "-x"
    if name == "--completion":
        value = f"-x -a '{' '.join(COMPLETION_SHELLS)}'"
    return f"complete -c bkmcp -n '__bkmcp_option {name}' -l {name[2:]} {value}\n"


# The characters of a name the completion offers. The scripts take each word literally, but a shell inserts a
# chosen word into the line unquoted (zsh's bashcompinit) and runs it on Enter, so a server, tool or flag name is
# offered only when it holds none but these (MCP tool names keep to far fewer).
_COMPLETION_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-+:/@%,")


def render_completion_names(names: Iterable[Any]) -> str:
    """The names a completion may offer, one a line: a name with any character outside ``_COMPLETION_SAFE``
    (``$``, quotes, spaces, ``*``, ``~``, …) or one starting with '-' is left out (docs/contract.md §2)."""
    safe = (name for name in names if isinstance(name, str) and name and not name.startswith("-"))
    return "".join(f"{name}\n" for name in safe if set(name) <= _COMPLETION_SAFE)


def render_completion_words(tools: Sequence[Any], tool: str | None) -> str:
    """What ``--completion tools|flags`` prints (``render_completion_names``): the tool names (``tool`` None), or
    that tool's flags as ``--name``."""
    if tool is None:
        return render_completion_names(t.get("name") for t in tools if isinstance(t, dict))
    found = next((t for t in tools if isinstance(t, dict) and t.get("name") == tool), None)
    flags = [] if found is None else [f"--{name}" for name in build_tool_flags(found).flags]
    return "".join(f"{flag}\n" for flag in flags if set(flag) <= _COMPLETION_SAFE)


# A URI, URI template or argument value may hold what a shell expands or splits (``{a,b}``, ``?``, ``&``, ``=``, a
# blank): it is offered in single quotes, inside which bash and zsh expand nothing, when it holds nothing but
# printable ASCII and no quote, backslash or ``!``; anything else is never offered.
_COMPLETION_QUOTABLE = frozenset(map(chr, range(0x20, 0x7F))) - set("'\\!")


def render_completion_quoted(words: Iterable[Any]) -> str:
    """What ``--completion resources|values`` prints, one a line: a word of ``_COMPLETION_SAFE`` as it is, another
    of ``_COMPLETION_QUOTABLE`` in single quotes, none starting with '-' (docs/contract.md §2)."""
    out = []
    for word in words:
        if isinstance(word, str) and word and not word.startswith("-") and set(word) <= _COMPLETION_QUOTABLE:
            out.append(f"{word}\n" if set(word) <= _COMPLETION_SAFE else f"'{word}'\n")
    return "".join(out)


def render_completion_target_flags(prompt: Mapping[str, Any] | None, template: str | None) -> str:
    """What ``--completion flags SERVER --prompt NAME|--read TEMPLATE`` prints: the prompt's arguments as flags
    (none named like a reserved option, docs/contract.md §6), or the template's variables."""
    if template is not None:
        names = uri_template_variables(template) if is_uri_template(template) else []
    else:
        declared = (prompt or {}).get("arguments")
        arguments = declared if isinstance(declared, list) else []
        names = [a["name"] for a in arguments if isinstance(a, dict) and isinstance(a.get("name"), str)]
        names = [name for name in names if name not in RESERVED_OPTION_NAMES]
    return "".join(f"--{name}\n" for name in names if name and set(name) <= _COMPLETION_SAFE)


# -- 9.6 server and tool help (render_server_help, render_tool_help) ---------------------------------------------------


def render_server_help(server: ServerConfig, config: str | None = None) -> str:
    """Static help for one configured server: reads no environment variables and makes no request."""
    lines = [f"bkmcp server {server.name!r} ({server.type})", "", f"  config file    {server.config_file}"]
    if server.type == "http":
        lines.append(f"  url            {redact_url(server.url or '')}")
        if server.headers:
            lines.append("  headers")
            width = max(len(n) for n, _ in server.headers)
            for name, value in server.headers:
                shown = REDACTED if is_secret_name(name) else value
                lines.append(f"    {name.ljust(width)}  {shown}")
        else:
            lines.append("  headers        (none: anonymous)")
    else:
        lines.append(f"  command        {server.command}")
        if server.args:
            lines.append(f"  args           {' '.join(server.args)}")
        if server.env:
            lines.append(f"  env            {', '.join(f'{n}={REDACTED}' for n, _ in server.env)}")
        if server.cwd:
            lines.append(f"  cwd            {server.cwd}")
    lines.append(f"  protocol       {server.protocol_version or 'negotiated (2026-07-28 probe, legacy fallback)'}")
    name = build_server_command(server.name, config)[len("bkmcp ") :]
    lines += [
        "",
        "Usage:",
        f"  bkmcp {name} --check                    connect, negotiate and discover every tool",
        f"  bkmcp {name} --tools                    list every tool with its inputSchema (JSON)",
        f"  bkmcp {name} --tools --brief            each tool's name, first line and flags (compact)",
        f"  bkmcp {name} <tool> --help              show a tool's flags (discovers its schema)",
        f"  bkmcp {name} <tool> [--<param> VALUE]   call a tool once with typed flags",
        f"  bkmcp {name} <tool> --body '{{...}}'      call with a complete arguments object",
        f"  bkmcp {name} <tool> --body @args.json --dry-run   preview offline, no network",
        f"  bkmcp {name} --resources [--brief]      list every resource and resource template",
        f"  bkmcp {name} --read URI [-r]            read one resource (a template: --VAR VALUE per variable)",
        f"  bkmcp {name} --prompts                  list every prompt",
        f"  bkmcp {name} --prompt NAME [--ARG VALUE]   get a prompt (--help: its arguments)",
        f"  bkmcp {name} <tool> ... --task | --detach   run a call as a task: wait for it, or print its handle",
        f"  bkmcp {name} --task-result ID --wait     a task's result (--task-status ID, --task-cancel ID, --tasks)",
        f"  bkmcp {name} --skills                   list every skill (SEP-2640)",
        f"  bkmcp {name} --skill NAME [--out DIR]   load a skill, every file verified (--out: a copy)",
        "",
        "Examples:",
        f"  bkmcp {name} --check",
        f"  bkmcp {name} --tools --jq '.data.tools[].name'",
        "",
    ]
    return "\n".join(lines)


def render_template_help(server_name: str, template: str, config: str | None = None) -> str:
    """``--read TEMPLATE --help``, offline: the command to read it (with the ``--config`` given) and its variables,
    each a required flag."""
    names = uri_template_variables(template)
    given = ["--config", shell_quote(config)] if config is not None else []
    target = [shell_quote(server_name), "--read", shell_quote(template)]
    command = terminal_safe(" ".join(["bkmcp", *target]))
    usage = terminal_safe(" ".join(["bkmcp", *given, *target, *(f"--{name} VALUE" for name in names)]))
    out = [command, "", "Usage:", "  " + usage]
    out += ["", "Variables (RFC 6570, expanded by bkmcp):" if names else "Variables: none"]
    width = max((len(name) for name in names), default=0) + 8
    out += [f"  {terminal_safe(f'--{name} VALUE').ljust(width)}  required" for name in names]
    return "\n".join(out) + "\n"


def render_prompt_help(server_name: str, prompt: Mapping[str, Any], config: str | None = None) -> str:
    """``--prompt NAME --help``: the prompt's description and its arguments (string flags), required ones marked;
    the Usage line with the ``--config`` given."""
    target = [shell_quote(server_name), "--prompt", shell_quote(str(prompt.get("name")))]
    command = printable(" ".join(["bkmcp", *target]))
    given = ["--config", shell_quote(config)] if config is not None else []
    title = prompt.get("title")
    out = _wrap(command + (f" - {title}" if isinstance(title, str) and title.strip() else ""), HELP_WIDTH)
    if isinstance(prompt.get("description"), str) and prompt["description"].strip():
        out += ["", *_paragraph(prompt["description"].strip())]
    declared = prompt.get("arguments")
    arguments = [a for a in declared if isinstance(a, dict)] if isinstance(declared, list) else []
    arguments.sort(key=lambda a: a.get("required") is not True)
    flags = [
        f"--{a.get('name')} VALUE" if a.get("required") is True else f"[--{a.get('name')} VALUE]" for a in arguments
    ]
    usage = [printable(word) for word in ["bkmcp", *given, *target]]
    out += ["", "Usage:", *_fill([*usage, *flags], HELP_WIDTH, "  ", "      ")]
    out += ["", "Arguments (strings):" if arguments else "Arguments: none"]
    for argument in arguments:
        name = str(argument.get("name"))
        status = "required" if argument.get("required") is True else "optional"
        if name in RESERVED_OPTION_NAMES:
            status += "; no flag: its name is a bkmcp option"
        out.append(printable(f"  --{name}  {status}"))
        if isinstance(argument.get("description"), str):
            out += _wrap(argument["description"], HELP_WIDTH, "      ", "      ")
    return "\n".join(out) + "\n"


HELP_WIDTH = 80
_HINT_WORDS = (
    ("readOnlyHint", "read-only", "may modify its environment"),
    ("destructiveHint", "destructive", "not destructive (additive only)"),
    ("idempotentHint", "idempotent", "not idempotent"),
    ("openWorldHint", "open world (reaches external systems)", "closed world"),
)


def _cell_width(text: str) -> int:
    """Terminal columns of ``text``: East Asian wide/fullwidth characters take two, combining marks none."""
    if text.isascii():
        return len(text)
    import unicodedata

    return sum(2 if _is_wide(ch) else 0 if unicodedata.combining(ch) else 1 for ch in text)


def _wrap(text: str, width: int, indent: str = "", first_indent: str | None = None) -> list[str]:
    """Greedy wrap by display width; CJK text (no spaces) breaks between characters. A paragraph's hard line breaks
    are joined first; blank lines, list items and indented lines keep their own lines (``_flowing_lines``), an
    indented line its indentation (up to 8 columns) and a list item a hanging indent."""
    first = indent if first_indent is None else first_indent
    out: list[str] = []
    for paragraph in _flowing_lines(text):
        if not paragraph.strip():
            if out and out[-1].strip():
                out.append("")
            continue
        words = paragraph.lstrip()
        lead = " " * min(len(paragraph) - len(words), 8)
        item = _LIST_ITEM.match(words)
        atoms: list[tuple[str, bool]] = []  # (piece, space before it)
        if words.isascii():
            atoms = [(word, True) for word in words.split()]
        else:
            for word in words.split():
                atoms.extend((piece, i == 0) for i, piece in enumerate(_word_atoms(word)))
        line = (first if not out else indent) + lead
        following = indent + lead + (" " * len(item.group()) if item else "")
        line_start = len(line)
        used = _cell_width(line)
        for piece, spaced in atoms:
            sep = " " if spaced and len(line) > line_start else ""
            cells = (len(piece) if piece.isascii() else _cell_width(piece)) + len(sep)
            if len(line) > line_start and used + cells > width:
                out.append(line)
                line = following
                line_start = len(line)
                used = _cell_width(line)
                sep = ""
                cells = _cell_width(piece)
            line += sep + piece
            used += cells
        out.append(line)
    while out and not out[-1].strip():
        out.pop()
    return out


def _paragraph(text: str) -> list[str]:
    """``text`` wrapped for help, indented by two columns."""
    return _wrap(text, HELP_WIDTH, "  ", "  ")


_LIST_ITEM = lazy_re(r"(?:[-*+\u2022]|[0-9]{1,3}[.)])[ ]+")


def _flowing_lines(text: str) -> list[str]:
    """The lines of server text as a reader meant them: a line joins the one before it (a hard-wrapped paragraph
    flows again), unless either is blank or indented or it is a list item (``- ``, ``* ``, ``1. ``). Two CJK
    characters meet without a space."""
    out: list[str] = []
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        line = printable(line.replace("\t", "    ")).rstrip()
        if (
            out
            and out[-1]
            and not out[-1][0].isspace()
            and line
            and not line[0].isspace()
            and not _LIST_ITEM.match(line)
        ):
            glue = "" if _is_wide(out[-1][-1]) and _is_wide(line[0]) else " "
            out[-1] += glue + line
        else:
            out.append(line)
    return out


def _is_wide(ch: str) -> bool:
    if ch < "\u1100":  # nothing below U+1100 is wide: skip the table lookup for Latin text
        return False
    import unicodedata

    return unicodedata.east_asian_width(ch) in ("W", "F")


def _word_atoms(word: str) -> list[str]:
    """Break points inside a word: around each wide (CJK) character, which may wrap anywhere."""
    if word < "\u1100" and max(word) < "\u1100":
        return [word]
    pieces: list[str] = []
    buf = ""
    for ch in word:
        if _is_wide(ch):
            if buf:
                pieces.append(buf)
                buf = ""
            pieces.append(ch)
        else:
            buf += ch
    if buf:
        pieces.append(buf)
    return pieces or [word]


JS_SAFE_INTEGER = 2**53 - 1  # Number.MAX_SAFE_INTEGER: zod writes ± it as the bounds of every integer


def _is_js_safe_bound(value: Any) -> bool:
    """A bound that only says "a JavaScript number": not a limit worth showing (validation still applies it)."""
    return is_json_number(value) and value in (JS_SAFE_INTEGER, -JS_SAFE_INTEGER)


def _example_value(schema: Any, root: Any, name: str, depth: int = 0) -> Any:
    """A plausible placeholder for a property: const, first enum value, default, else by type."""
    schema = resolve_schema(schema, root)[0]
    if not isinstance(schema, dict) or depth > 4:
        return f"<{name}>"
    if "const" in schema:
        return schema["const"]
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        return enum[0]
    if "default" in schema and schema["default"] is not None:
        return schema["default"]
    examples = schema.get("examples")
    if isinstance(examples, list) and examples:
        return examples[0]
    for keyword in COMBINATORS:
        options = schema.get(keyword)
        if isinstance(options, list):
            for option in options:
                resolved = resolve_schema(option, root)[0]
                if isinstance(resolved, dict) and resolved.get("type") != "null":
                    return _example_value(resolved, root, name, depth + 1)
    declared = schema.get("type")
    if isinstance(declared, list):
        declared = next((t for t in declared if t != "null"), "null")
    if declared == "string":
        return f"<{name}>"
    if declared == "integer":
        low = schema.get("minimum")
        return low if isinstance(low, int) and not isinstance(low, bool) and not _is_js_safe_bound(low) else 1
    if declared == "number":
        low = schema.get("minimum")
        return low if is_json_number(low) else JsonNumber("1.5")
    if declared == "boolean":
        return True
    if declared == "null":
        return None
    if declared == "array":
        items = schema.get("items")
        return [_example_value(items, root, name, depth + 1)] if isinstance(items, dict) and items else []
    if declared == "object" or isinstance(schema.get("properties"), dict):
        return _example_object(schema, root, depth + 1, limit=4)[0]
    return f"<{name}>"


def _example_object(schema: dict[str, Any], root: Any, depth: int, limit: int) -> tuple[dict[str, Any], int]:
    """Required properties first, then optional ones up to ``limit``; returns (object, omitted count). An optional
    boolean without a default is left out: any value given would change the call's meaning."""
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = schema.get("required")
    chosen = list(dict.fromkeys(r for r in required if isinstance(r, str))) if isinstance(required, list) else []
    optional = [n for n in properties if n not in chosen]
    shown = [n for n in optional if not _is_boolean_without_default(properties.get(n), root)]
    room = max(0, limit - len(chosen))
    chosen += shown[:room]
    value = {name: _example_value(properties.get(name), root, name, depth) for name in chosen}
    return value, len(optional) - min(room, len(shown))


def _is_boolean_without_default(schema: Any, root: Any) -> bool:
    """A boolean (or boolean-or-null) property that declares no default, const or enum to show."""
    schema = resolve_schema(schema, root)[0]
    if not isinstance(schema, dict) or any(schema.get(k) is not None for k in ("default", "const", "enum")):
        return False
    declared = schema.get("type")
    listed = declared if isinstance(declared, list) else [declared]
    types = {t for t in listed if isinstance(t, str)}
    return "boolean" in types and types <= {"boolean", "null"}


def _clip_strings(value: Any, limit: int = 32) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 1] + "…"
    if isinstance(value, list):
        return [_clip_strings(v, limit) for v in value]
    if isinstance(value, dict):
        return {k: _clip_strings(v, limit) for k, v in value.items()}
    return value


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _flag_example(flag: ToolFlag, value: Any) -> list[str]:
    """Shell words for one flag in an example; a placeholder of the right type when the value does not fit."""
    if flag.kind == "boolean":
        return [f"{flag.option}={'false' if value is False else 'true'}"]
    if flag.kind == "string":
        ok = isinstance(value, str) and value.isprintable()  # newlines/controls make a poor example
        return [flag.option, _shell_quote(value if ok else f"<{flag.name}>")]
    if flag.kind in ("integer", "number"):
        fits = is_json_number(value) and not isinstance(value, float)
        fits = fits and (flag.kind == "number" or is_json_integer(value))
        return [flag.option, dump_json(value) if fits else "1"]
    if flag.kind == "json":
        return [flag.option, _shell_quote(printable(dump_json(value)))]
    fits = isinstance(value, list if flag.kind == "array" else dict)
    return [flag.option, _shell_quote(printable(dump_json(value if fits else [] if flag.kind == "array" else {})))]


def _flag_example_value(flag: ToolFlag, root: Any) -> Any:
    """A flag's example value; an object too long for one example line shows its required properties only."""
    value = _clip_strings(_example_value(flag.schema, root, flag.name))
    if isinstance(value, dict) and len(dump_json(value)) > 48 and isinstance(flag.schema.get("properties"), dict):
        value = _clip_strings(_example_object(flag.schema, root, 1, limit=0)[0])
    return value


def _annotation_lines(tool: Mapping[str, Any]) -> list[str]:
    annotations = tool.get("annotations")
    if not isinstance(annotations, dict):
        return []
    words = [yes if annotations[key] else no for key, yes, no in _HINT_WORDS if isinstance(annotations.get(key), bool)]
    if not words:
        return []
    return _paragraph(", ".join(words) + " (hints declared by the server, not verified)")


def render_tool_help(server_name: str, tool: Mapping[str, Any], config: str | None = None) -> str:
    """Tool help (D02, contract.md §7): flags with type, required, enum, default (information only) and description;
    the fields that need --body and why; a --body example built from the schema; examples. Fits 80 columns."""
    name = str(tool.get("name"))
    mapped = build_tool_flags(tool)
    schema = schema_object(tool) or {}
    command = tool_command(server_name, name, config)
    words = tool_words(server_name, name, config)

    def command_lines(*parts: str) -> list[str]:  # copy-pasteable within 80 columns: ' \' continuations
        lines = _fill([*words, *parts], HELP_WIDTH - 2, "  ", "      ")
        return [line + " \\" for line in lines[:-1]] + lines[-1:]

    out: list[str] = []
    annotations = tool.get("annotations") if isinstance(tool.get("annotations"), dict) else {}
    title = tool.get("title") or (annotations or {}).get("title")
    # the heading names the tool (its Usage and Examples lines carry --config, to be pasted)
    heading = tool_command(server_name, name) + (f" - {title}" if isinstance(title, str) and title.strip() else "")
    out += _wrap(heading, HELP_WIDTH)
    description = tool.get("description")
    if isinstance(description, str) and description.strip():
        out.append("")
        out += _paragraph(description.strip())
    hints = _annotation_lines(tool)
    if hints:
        out += ["", "Annotations:", *hints]
    if tool_task_support(tool) == "required":  # docs/contract.md §5: never called
        out += [""] + _paragraph(f"Task-only: {TASK_ONLY_NOTE}.")

    flags = list(mapped.flags.values())
    flags.sort(key=lambda f: not f.required)  # required first, then schema order
    out += ["", "Usage:"]
    optional = [f for f in flags if not f.required]
    usage_parts = [f.usage for f in flags if f.required]
    usage_parts += [f"[{f.usage}]" for f in optional] if len(optional) <= 4 else ["[FLAGS...]"] if optional else []
    out += _fill([*words, *usage_parts], HELP_WIDTH, "  ", "      ")
    out += _fill([*words, "--body", "JSON|@FILE|-"], HELP_WIDTH, "  ", "      ")

    out += ["", "Flags:" if flags else "Flags: none"]
    spec_width = min(max((len(f.usage) for f in flags), default=0), 44)
    for flag in flags:
        status = "required" if flag.required else "optional"
        spec = printable(flag.usage)
        if len(spec) <= spec_width:
            out.append(f"  {spec.ljust(spec_width)}  {status}")
        else:
            out += _wrap(spec, HELP_WIDTH, "      ", "  ")
            out.append(f"  {''.ljust(spec_width)}  {status}")
        out += _flag_details(flag)

    if mapped.body_only:
        out += ["", "Fields without a flag (set them with --body):"]
        labels = {n: _field_label(n) for n in mapped.body_only}
        label_width = min(max(len(label) for label in labels.values()), 44)
        for field_ in mapped.body_only.values():
            status = "required" if field_.required else "optional"
            out.append(f"  {labels[field_.name].ljust(label_width)}  {status}")
            out += _wrap(f"no flag: {field_.reason}", HELP_WIDTH, "      ", "      ")
            if isinstance(field_.schema, dict) and isinstance(field_.schema.get("description"), str):
                out += _wrap(field_.schema["description"], HELP_WIDTH, "      ", "      ")
        reserved = [b.name for b in mapped.body_only.values() if b.name in RESERVED_OPTION_NAMES]
        if reserved:
            out += [""] + _paragraph(
                f"Reserved names ({', '.join(reserved)}) are bkmcp's own options, so they are never tool flags "
                "and never renamed; pass them inside --body under their exact names."
            )
    for note in mapped.notes:
        out += [""] + _paragraph(f"Note: {note}")

    example, omitted = _example_object(schema, schema, 0, limit=6)
    example = _clip_strings(example)
    out += ["", "--body example (required fields first; placeholder values):"]
    one_line = f"  {command} --body {_shell_quote(_compact_json(example))}"
    if _cell_width(one_line) <= HELP_WIDTH:
        out.append(one_line)
    else:
        prefix = command_lines("--body")
        start = _cell_width(f"{prefix[-1]} '")
        body_lines = _shell_quote(_pretty_json(example, 2, HELP_WIDTH, start)).split("\n")
        out += prefix[:-1]
        out.append(f"{prefix[-1]} {body_lines[0]}")
        out += body_lines[1:]
    if omitted:
        out.append(f"  ({omitted} more optional field{'s' if omitted != 1 else ''} not shown)")

    out += ["", "Examples:"]
    required_body_only = [b.name for b in mapped.body_only.values() if b.required]
    if flags and not required_body_only:
        chosen = [f for f in flags if f.required] or flags[:1]
        if len(chosen) < 3:
            chosen += [f for f in flags if not f.required and f not in chosen][: 3 - len(chosen)]
        parts = [word for f in chosen for word in _flag_example(f, _flag_example_value(f, schema))]
        out += command_lines(*parts)
    elif not required_body_only:
        out += command_lines()
    else:
        which = "field {} has no flag" if len(required_body_only) == 1 else "fields {} have no flags"
        out += _paragraph(
            f"(required {which.format(', '.join(required_body_only))}, so call this tool with --body as shown above)"
        )
    out += command_lines("--body", "@args.json")
    out += command_lines("--body", "@args.json", "--dry-run")
    any_json = (
        " A JSON-value flag's text is JSON: write a string in JSON quotes."
        if any(f.kind == "json" for f in flags)
        else ""
    )
    out += [""] + _paragraph(
        "Only the flags you give are sent; defaults are shown for information and never sent. Booleans are "
        f"--name=true or --name=false; arrays and objects are JSON.{any_json} With --body, the JSON object is the "
        "complete arguments and named flags are ignored."
    )
    return "\n".join(out) + "\n"


def _fill(parts: Sequence[str], width: int, first_indent: str, indent: str) -> list[str]:
    """Greedy line fill where each part is unbreakable (usage synopsis, examples)."""
    lines: list[str] = []
    line = first_indent
    for part in parts:
        part = printable(part)
        if line.strip() and _cell_width(line) + 1 + _cell_width(part) > width:
            lines.append(line)
            line = indent
        line += (" " if line.strip() else "") + part
    lines.append(line)
    return lines


def _field_label(name: str) -> str:
    """A property name as shown in help: plain when it reads unambiguously, else JSON-quoted."""
    if PLAIN_ASCII_NAME.fullmatch(name) or (
        name and name.isprintable() and not any(ch.isspace() for ch in name) and '"' not in name
    ):
        return name
    return printable(json.dumps(name, ensure_ascii=False))


def _compact_json(value: Any) -> str:
    """JSON on one line with a space after ':' and ',' (readable in help, still valid JSON, terminal-safe)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{printable(dump_json(k))}: {_compact_json(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_compact_json(v) for v in value) + "]"
    return printable(dump_json(value))


def _plain(text: str) -> str:
    return re.sub(r"[\s_\-]+", "", text).lower()


def _pretty_json(value: Any, indent: int, width: int, start: int | None = None) -> str:
    """JSON that keeps short containers on one line and breaks long ones to fit ``width``.

    ``indent`` is the indentation of the line the value is on, ``start`` the column where the value begins.
    """
    compact = _compact_json(value)
    begin = indent if start is None else start
    shown = _cell_width(compact) + 4 * compact.count("'")  # inside '...', shell quoting turns ' into '"'"'
    if not isinstance(value, (dict, list)) or not value or begin + shown + 1 <= width:  # +1: a ',' or the closing '
        return compact
    pad = " " * (indent + 2)
    if isinstance(value, dict):
        items = []
        for key, item in value.items():
            label = f"{printable(dump_json(key))}: "
            label_width = _cell_width(label) + 4 * label.count("'")  # the key is shell-quoted too
            items.append(label + _pretty_json(item, indent + 2, width, indent + 2 + label_width))
        opening, closing = "{", "}"
    else:
        items = [_pretty_json(item, indent + 2, width) for item in value]
        opening, closing = "[", "]"
    return opening + "\n" + ",\n".join(pad + item for item in items) + "\n" + " " * indent + closing


def _flag_details(flag: ToolFlag) -> list[str]:
    lines: list[str] = []
    schema = flag.schema
    indent = "      "

    def say(text: str) -> None:
        lines.extend(_wrap(text, HELP_WIDTH, indent, indent))

    title = schema.get("title")
    description = schema.get("description")
    if isinstance(description, str) and description.strip():
        say(description.strip())
    elif isinstance(title, str) and _plain(title) != _plain(flag.name):  # pydantic titles just echo the name
        say(title.strip())
    if flag.nullable:
        say(f"may also be null: only with --body (the flag's text is always a {flag.kind})")
    enum = schema.get("enum")
    if isinstance(enum, list) and enum:
        limit = 30  # a huge enum would bury the other flags; --tools has the full list
        plain = [isinstance(v, str) and v and v.strip() == v and "," not in v for v in enum[:limit]]
        shown = ", ".join(v if ok else short_text(dump_json(v), 60) for v, ok in zip(enum, plain))
        more = f" … and {len(enum) - limit} more (see --tools)" if len(enum) > limit else ""
        say(f"one of: {shown}{more}")
    if "const" in schema:
        say(f"must be: {dump_json(schema['const'])}")
    if "default" in schema:
        say(f"default: {short_text(schema['default'], 60)} (information only, not sent)")
    integral = flag.kind == "integer" or (flag.kind == "json" and "integer" in json_member_types(schema))
    bounds = [
        f"{word} {dump_json(schema[key])}"
        for key, word in (
            ("minimum", ">="),
            ("exclusiveMinimum", ">"),
            ("maximum", "<="),
            ("exclusiveMaximum", "<"),
            ("minLength", "min length"),
            ("maxLength", "max length"),
            ("minItems", "min items"),
            ("maxItems", "max items"),
        )
        if key in schema and is_json_number(schema[key]) and not (integral and _is_js_safe_bound(schema[key]))
    ]
    if bounds:
        say("limits: " + ", ".join(bounds))
    if flag.kind == "array":
        items = schema.get("items")
        item_type = items.get("type") if isinstance(items, dict) else None
        of = f" of {item_type}" if isinstance(item_type, str) else ""
        say(f"a JSON array{of}, e.g. {flag.option} '[...]' (never comma-separated)")
    elif flag.kind == "object":
        say(f"a JSON object, e.g. {flag.option} '{{...}}'")
    elif flag.kind == "json":
        types = json_member_types(schema)
        what = f"a JSON value: {types_words(types)}" if types else "any JSON value"
        quoted = " (a string is written in JSON quotes)" if "string" in types or not types else ""
        examples = json_flag_examples(flag)
        say(f"{what}, read as JSON text{quoted}, e.g.")
        lines += _fill([*(e + "," for e in examples[:-1]), examples[-1]], HELP_WIDTH, indent, indent)
    return lines


# -- 9.7 blobs to files: where a result holds base64 (find_blobs), saved through 2.7's writer (save_blobs) -------------


@dataclass
class BlobSpot:
    """One base64 payload of a command's result: ``holder[key]`` is its text (docs/contract.md §7)."""

    holder: dict[str, Any]
    key: str  # "blob" (a resource's contents) or "data" (an image or audio block)
    uri: Any
    mime_type: Any
    kind: str  # "image", "audio" or "blob": a file's name when its URI gives none


def find_blobs(data: Mapping[str, Any]) -> list[BlobSpot]:
    """Every blob of a ``--read`` (its contents), ``--prompt`` (its messages' blocks) or tool call's result (its
    content blocks): ``image`` and ``audio`` data, a ``blob`` of a resource's contents or of an embedded resource."""
    result = data.get("result")
    if not isinstance(result, dict):
        return []
    if "uri" in data:
        contents = result.get("contents")
        blocks: list[Any] = [{"type": "resource", "resource": item} for item in contents or []]
    elif "prompt" in data:
        blocks = []
        for message in result.get("messages") or []:
            content = message.get("content") if isinstance(message, dict) else None
            blocks.extend(content if isinstance(content, list) else [content])
    else:
        content = result.get("content")
        blocks = content if isinstance(content, list) else []
    spots = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind, inner = block.get("type"), block.get("resource")
        if kind in ("image", "audio") and isinstance(block.get("data"), str):
            spots.append(BlobSpot(block, "data", None, block.get("mimeType"), str(kind)))
        elif kind == "resource" and isinstance(inner, dict) and isinstance(inner.get("blob"), str):
            spots.append(BlobSpot(inner, "blob", inner.get("uri"), inner.get("mimeType"), "blob"))
    return spots


def blob_size(text: str) -> int:
    """The decoded size of base64 ``text``, without decoding it (whitespace and padding carry no data)."""
    return sum(1 for ch in text if not ch.isspace() and ch != "=") * 3 // 4


def decode_blobs(spots: Sequence[BlobSpot], max_bytes: int, data: dict[str, Any]) -> list[bytes]:
    """Each spot's bytes, checked before any is written: one over ``max_bytes`` is ``blob_too_large`` (every blob
    then described in ``data`` as ``{bytes, mimeType, path: null}``, no base64), text that is not base64 is
    ``mcp_protocol_error``."""
    import base64
    import binascii

    sizes = [blob_size(spot.holder[spot.key]) for spot in spots]
    over = next((i for i, size in enumerate(sizes) if size > max_bytes), None)
    if over is not None:
        for spot, size in zip(spots, sizes):
            spot.holder[spot.key] = {"path": None, "bytes": size, "mimeType": spot.mime_type}
        what = f"the blob of {short_text(spots[over].uri, 80)}" if spots[over].uri is not None else "a blob"
        raise blob_over_cap(
            what,
            sizes[over],
            max_bytes,
            "nothing was written",
            f"raise --max-blob-bytes (now {max_bytes}) to write it",
            data,
        )
    decoded = []
    for spot in spots:
        try:
            decoded.append(base64.b64decode("".join(spot.holder[spot.key].split()), validate=True))
        except (binascii.Error, ValueError):
            raise ProtocolError(
                f"the server sent a {spot.kind} that is not base64 ({short_text(spot.uri or spot.mime_type, 80)}): "
                "nothing was written"
            ) from None
    return decoded


_SKILL_DIRECTORY = lazy_re(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def save_skill(data: dict[str, Any], writer: BlobWriter, max_bytes: int) -> None:
    """``--skill NAME --out DIR``: the verified files written as a new directory named after the skill (``name-1``
    when taken; ``skill`` for a name that is not a plain one), each at its relative path; each file's ``text`` or
    ``blob`` replaced by ``file`` (the path written) and ``directory`` added. A file over ``max_bytes`` is
    ``blob_too_large`` before anything is written; a write that fails removes what was written."""
    import base64

    files = data["files"]
    payloads = [
        f["text"].encode("utf-8", "surrogatepass") if "text" in f else base64.b64decode(f["blob"]) for f in files
    ]
    for file, payload in zip(files, payloads):
        if len(payload) > max_bytes:
            raise blob_over_cap(
                f"skill file {short_text(file['path'], 120)}",
                len(payload),
                max_bytes,
                "nothing was written",
                f"raise --max-blob-bytes (now {max_bytes}) to write it",
                {key: data[key] for key in ("server", "skill", "uri")},
            )
    name = data["skill"] if _SKILL_DIRECTORY.fullmatch(data["skill"]) else "skill"
    try:
        folder = writer.make_directory(name)
        written = [writer.write((folder, *f["path"].split("/")), p, numbered=False) for f, p in zip(files, payloads)]
    except BkmcpError:
        writer.discard()
        raise
    for file, path in zip(files, written):
        file.pop("text", None)
        file.pop("blob", None)
        file["file"] = path
    data["directory"] = os.path.join(writer.path, folder)


def save_blobs(spots: Sequence[BlobSpot], decoded: Sequence[bytes], writer: BlobWriter) -> None:
    """Write each blob as a new file through ``writer`` and put ``{path, bytes, sha256, mimeType}`` in place of its
    base64; a write that fails removes what was written (``blob_write_error``)."""
    import hashlib

    files = []
    try:
        for spot, payload in zip(spots, decoded):
            files.append(writer.write((build_blob_name(spot.uri, spot.mime_type, spot.kind),), payload))
    except BkmcpError:
        writer.discard()
        raise
    for spot, payload, path in zip(spots, decoded, files):
        sha256 = hashlib.sha256(payload).hexdigest()
        spot.holder[spot.key] = {"path": path, "bytes": len(payload), "sha256": sha256, "mimeType": spot.mime_type}


# ======================================================================================================
# 10. Resident mode — deferred in the pyz
# ======================================================================================================

# -- 10.1 registry and credentials (docs/contract.md §11.3, §11.4) -------------------------------------------------


# -- 10.1.1 registry rows and credentials: a row -> ResolvedServer -----------------------------------------------------

# The registry says which servers exist and which credentials they use. The resident engine (10.2) asks it for
# one user's view per command (``Registry.view``) and turns a row into the ``ResolvedServer`` the transports use
# (``resolve_registry_server``). Two sources: a SQLite file (the embedded default) and the host platform's
# ``/internal/mcp/config`` endpoint. A bad row is that server's ``invalid_mcp_config``, never the registry's; no
# message of this block ever contains a credential value.

# docs/contract.md §11.3, verbatim: sqlite_master of a new registry is exactly what this text creates.
REGISTRY_SCHEMA = """\
CREATE TABLE mcp_servers (
  name TEXT PRIMARY KEY,                -- [A-Za-z0-9_.-]{1,64}
  transport_type TEXT NOT NULL DEFAULT 'stdio' CHECK (transport_type IN ('stdio','http')),
  command TEXT, args TEXT,              -- stdio: args is a JSON array of strings
  env_template TEXT,                    -- stdio: JSON object of strings, may hold ${user.FIELD}
  url TEXT, headers TEXT,               -- http: headers is a JSON object of strings, may hold ${user.FIELD}
  isolation TEXT NOT NULL DEFAULT 'public' CHECK (isolation IN ('public','user')),
  protocol_version TEXT,                -- optional pin, as protocolVersion in mcp.json
  enabled INTEGER NOT NULL DEFAULT 1);
CREATE TABLE mcp_credentials (          -- system default credentials, per server
  server_name TEXT PRIMARY KEY REFERENCES mcp_servers(name), credentials TEXT NOT NULL);   -- JSON object
CREATE TABLE mcp_user_credentials (     -- a user's own credentials, per server
  user_id TEXT NOT NULL, server_name TEXT NOT NULL REFERENCES mcp_servers(name), credentials TEXT NOT NULL,
  PRIMARY KEY (user_id, server_name));
CREATE TABLE mcp_tools_cache (          -- user_id '' for a public server
  server_name TEXT NOT NULL, user_id TEXT NOT NULL, tools TEXT NOT NULL, protocol_version TEXT,
  fetched_at REAL NOT NULL, ttl_ms INTEGER,                     -- the server's ttlMs; NULL or 0: none
  PRIMARY KEY (server_name, user_id));
"""
REGISTRY_TABLES = ("mcp_servers", "mcp_credentials", "mcp_user_credentials", "mcp_tools_cache")
REGISTRY_COLUMNS = (
    "name",
    "transport_type",
    "command",
    "args",
    "env_template",
    "url",
    "headers",
    "isolation",
    "protocol_version",
    "enabled",
)
REGISTRY_CACHE_SECONDS = 5.0  # HTTP source: one answer per (user, access token) is reused this long
_CACHE_WRITE_WAIT = 1.0  # the tools cache is best effort: a locked file is waited for this long, then skipped
_REGISTRY_ANSWER_LIMIT = 64 * 1024 * 1024
_REGISTRY_ANSWERS_KEPT = 4096  # HTTP source: cached answers (one per user and token) at most
_REGISTRY_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# Credential fields that become headers of an HTTP server unless a header of that name is configured (§11.4).
_CREDENTIAL_HEADERS = (
    ("api_key", "Authorization", "Bearer "),
    ("token", "Authorization", "Bearer "),
    ("API_KEY", "X-API-Key", ""),
)


@dataclass
class RegistryServer:
    """One row of ``mcp_servers`` (or of the HTTP source's ``servers``), its JSON columns parsed.

    A row that cannot be used keeps what could be read and sets ``problem`` (an ``InvalidConfigError``): only
    that server fails, with that error, and only when it is used.
    """

    name: str
    transport_type: str
    command: str | None = None
    args: list[str] = field(default_factory=list)
    env_template: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    isolation: str = "public"
    protocol_version: str | None = None
    enabled: bool = True
    problem: BkmcpError | None = None
    source: str = "registry"  # how messages name the registry ("registry /path/r.db", "registry https://…")


@dataclass
class RegistryView:
    """What one command may see: every server (enabled and disabled), the system credentials and the
    requesting user's own credentials (nobody else's). ``credential_problems`` holds unreadable credential rows,
    keyed ``("system" | "user", server)``; they fail only the server they belong to."""

    servers: dict[str, RegistryServer]
    system_credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    user_credentials: dict[str, dict[str, str]] = field(default_factory=dict)
    credential_problems: dict[tuple[str, str], BkmcpError] = field(default_factory=dict)
    complete: bool = True  # every server is listed (SQLite; the HTTP source's answer without a user)


def check_registry_name(name: str) -> str | None:
    """Why ``name`` cannot name a registry server (``[A-Za-z0-9_.-]{1,64}``, a CLI server name), or None."""
    if not name or len(name) > 64 or any(ch not in _REGISTRY_NAME_CHARS for ch in name):
        return "a registry server name is 1 to 64 of A-Z a-z 0-9 _ . -"
    return check_server_name(name)


def _json_column(value: Any, column: str, where: str, kind: type) -> Any:
    """A JSON column: JSON text (SQLite, HTTP) or an already parsed value (HTTP). NULL or blank -> None."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        try:
            value = parse_json(value)
        except JsonInputError:  # never echo the text: it may hold a literal credential
            raise InvalidConfigError(f"{where}: column {column!r} is not valid JSON text") from None
    if not isinstance(value, kind):
        raise InvalidConfigError(f"{where}: column {column!r} must be a JSON {'array' if kind is list else 'object'}")
    return value


def parse_registry_row(row: Mapping[str, Any], *, source: str) -> RegistryServer:
    """A server row -> ``RegistryServer``, validated with the CLI's rules for an ``mcpServers`` entry; a bad row
    is returned with ``problem`` set, never raised."""
    name = str(row.get("name"))
    kind = row.get("transport_type")
    if kind is None:  # docs/contract.md §11.3: stdio is the default (an HTTP-source row without the field)
        kind = "stdio"
    record = RegistryServer(name=name, transport_type=kind if isinstance(kind, str) else str(kind), source=source)
    where = f"{source}: server {safe_name(name)!r}"
    try:
        problem = check_registry_name(name)
        if problem:
            raise InvalidConfigError(f"{source}: invalid server name {safe_name(name)!r}: {problem}")
        if kind not in ("stdio", "http"):
            raise InvalidConfigError(f'{where}: unsupported transport_type ("stdio" or "http")')
        isolation = row.get("isolation")
        if isolation is not None and isolation not in ("public", "user"):
            raise InvalidConfigError(f'{where}: isolation must be "public" or "user"')
        record.isolation = isolation or "public"
        enabled = True if row.get("enabled") is None else row["enabled"]
        if not isinstance(enabled, (bool, int)) or enabled not in (0, 1):
            raise InvalidConfigError(f"{where}: enabled must be 0/1 or a boolean")
        record.enabled = bool(enabled)
        version = row.get("protocol_version")
        if version is not None and not isinstance(version, str):
            raise InvalidConfigError(f"{where}: protocol_version must be a string")
        record.protocol_version = version or None
        command, url = row.get("command"), row.get("url")
        if command is not None and not isinstance(command, str):
            raise InvalidConfigError(f"{where}: command must be a string")
        if url is not None and not isinstance(url, str):
            raise InvalidConfigError(f"{where}: url must be a string")
        record.command, record.url = command, url
        record.args = _json_column(row.get("args"), "args", where, list) or []
        record.env_template = _json_column(row.get("env_template"), "env_template", where, dict) or {}
        record.headers = _json_column(row.get("headers"), "headers", where, dict) or {}
        build_registry_config(record)  # the CLI's checks: command, args, env names, URL, header names and forms
    except InvalidConfigError as exc:
        record.problem = exc.copy()  # stored without the traceback (and frames) of its raise
    return record


def build_registry_config(record: RegistryServer, extra_headers: Sequence[tuple[str, str]] = ()) -> ServerConfig:
    """The ``mcpServers`` entry a row stands for, through the CLI's strict validation (section 3)."""
    entry: dict[str, Any] = {"type": record.transport_type}
    if record.transport_type == "http":
        entry["url"] = record.url
        entry["headers"] = {**record.headers, **dict(extra_headers)}
    else:
        entry["command"] = record.command
        entry["args"] = list(record.args)
        entry["env"] = dict(record.env_template)
    if record.protocol_version is not None:
        entry["protocolVersion"] = record.protocol_version
    return parse_server(record.source, record.name, entry)


def parse_credentials(value: Any, *, where: str) -> dict[str, str]:
    """A credentials column: a JSON object (or its text) of string values."""
    document = _json_column(value, "credentials", where, dict)
    if document is None or not all(isinstance(v, str) for v in document.values()):
        raise InvalidConfigError(f"{where}: credentials must be a JSON object of string values")
    return document


def select_credential(row: RegistryServer, *, view: RegistryView, user_id: str | None) -> dict[str, str]:
    """docs/contract.md §11.4: a user server takes the user's credential, else the system default, else
    ``mcp_credentials_missing``; a public server takes its system credential only (or none)."""
    name = row.name
    if row.isolation == "user" and user_id is None:
        raise CredentialsMissingError(
            f"server {name!r} is a per-user server: it needs a user", details={"server": name}
        )
    for scope, stored in (("user", view.user_credentials), ("system", view.system_credentials)):
        if scope == "user" and row.isolation != "user":
            continue
        problem = view.credential_problems.get((scope, name))
        if problem is not None:
            raise problem.copy()  # a stored error is never raised itself
        if name in stored:
            return stored[name]
    if row.isolation == "user":
        needed = _template_fields(row)
        details: dict[str, Any] = {"server": name}
        what = "credentials"
        if needed:
            details["field"] = needed[0]
            what = f"the credential field {needed[0]!r}"
        raise CredentialsMissingError(
            f"server {name!r} needs {what} and this user has no credentials for it (none of the user's own, no "
            "system default)",
            hint=f"store the user's credentials for {name!r} in the registry (mcp_user_credentials)",
            details=details,
        )
    return {}


def _template_fields(row: RegistryServer) -> list[str]:
    """The ``${user.FIELD}`` names a row's headers and env template use, in order of appearance."""
    fields: list[str] = []
    for value in (*row.headers.values(), *row.env_template.values()):
        if isinstance(value, str):
            for match in ENV_REF.finditer(value):
                if match.group(2) and match.group(2) not in fields:
                    fields.append(match.group(2))
    return fields


def check_user_field_places(row: RegistryServer) -> None:
    """``${user.FIELD}`` only in ``env_template`` and ``headers`` values (docs/resident-registry.md): elsewhere it
    is refused with the reason, before any credential is chosen."""
    places: list[tuple[str, str | None]] = [(f"args[{i}]", value) for i, value in enumerate(row.args)]
    places += [("command", row.command), ("url", row.url)]
    for place, value in places:
        if isinstance(value, str) and "${user." in value.replace("$${", ""):
            why = (
                "arguments are visible to every process on the host (ps, /proc)"
                if place.startswith("args")
                else f"it is not expanded in {place}"
            )
            raise InvalidConfigError(
                f"server {row.name!r} in {row.source}, {place}: ${{user.FIELD}} is not allowed here: {why}; put the "
                "credential in env_template (stdio) or a header (http)",
                details={"server": row.name},
            )


def build_credential_headers(record: RegistryServer, credential: Mapping[str, str]) -> list[tuple[str, str]]:
    """Headers an HTTP server gets from its credential's ``api_key`` / ``token`` / ``API_KEY`` fields (§11.4),
    as templates (a literal ``${`` in a value is escaped, so the value is never expanded)."""
    where = f"server {record.name!r} in {record.source}"
    configured = tuple(record.headers.items())
    added: list[tuple[str, str]] = []
    for field_name, header, prefix in _CREDENTIAL_HEADERS:
        if field_name not in credential or find_header(configured, header):
            continue
        if find_header(added, header):
            raise AuthConflictError(
                f"{where}: the credential has both 'api_key' and 'token', and both map to the Authorization header",
                hint="keep one of the two fields, or configure the Authorization header with ${user.FIELD}",
                details={"server": record.name},
            )
        bkapi = find_header(configured, "X-Bkapi-Authorization")
        if header == "Authorization" and bkapi:
            raise AuthConflictError(
                f"{where}: the credential field {field_name!r} maps to the Authorization header and the server "
                f"also sets {bkapi[0]!r}",
                hint=f"keep exactly one identity header: rename the credential field (it maps to Authorization "
                f"as {field_name!r}) and use it as ${{user.FIELD}} inside {bkapi[0]!r}",
                details={"server": record.name},
            )
        added.append((header, prefix + credential[field_name].replace("${", "$${")))
    return added


def check_registry_row(row: RegistryServer) -> None:
    """A row that can be resolved at all, checked before a credential is chosen for it: no stored problem,
    enabled, ``${user.FIELD}`` only where it may stand."""
    if row.problem is not None:
        raise row.problem.copy()  # a stored error is never raised itself (its traceback would grow)
    if not row.enabled:
        raise ServerDisabledError(
            f"server {row.name!r} is disabled in {row.source}",
            hint="enable it in the registry (mcp_servers.enabled = 1)",
            details={"server": row.name},
        )
    check_user_field_places(row)


def resolve_registry_server(
    row: RegistryServer,
    *,
    view: RegistryView,
    user_id: str | None,
    env: Mapping[str, str],
    inherited_env: Mapping[str, str] | None = None,
    credential: dict[str, str] | None = None,
) -> ResolvedServer:
    """A registry row for one user -> the ``ResolvedServer`` the engine opens (docs/contract.md §11.3, §11.4).

    ``credential``: the one a command already chose for the row (``select_credential``, once per command, after
    ``check_registry_row``); else the row is checked and the credential chosen here. Its fields are mapped to
    headers, ``${user.FIELD}`` and ``${NAME}`` (from ``env``, the resident's own environment) expanded by the CLI's
    one expansion function, and the CLI's header rules applied to the result. The redactor knows every credential
    value. ``inherited_env`` (stdio) defaults to the CLI's minimal set taken from ``env``.
    """
    if credential is None:
        check_registry_row(row)
        credential = select_credential(row, view=view, user_id=user_id)
    try:
        extra = build_credential_headers(row, credential) if row.transport_type == "http" else []
        config = build_registry_config(row, extra)
        resolved = resolve_server(config, env, user=credential)
    except (CredentialsMissingError, AuthConflictError, MissingEnvironmentVariableError) as exc:
        if "server" in exc.details:
            raise
        raise exc.copy(details={**exc.details, "server": row.name})  # noqa: B904 - the same error, completed
    for key, value in credential.items():
        resolved.redactor.add(value, whole=is_secret_name(key))
    resolved.cwd = None
    if resolved.type == "stdio" and inherited_env is not None:
        resolved.inherited_env = dict(inherited_env)
    return resolved


def render_registry_row(record: RegistryServer) -> dict[str, Any]:
    """A row as ``--list`` prints it: the table's columns, credential values of headers/env as ``***`` (a
    value made only of ``${…}`` references, after an auth scheme, is shown: it holds no secret)."""
    row: dict[str, Any] = {
        "name": record.name,
        "transport_type": record.transport_type,
        "command": record.command,
        "args": render_registry_args(record.args),
        "env_template": {k: _redact_template(k, v) for k, v in record.env_template.items()},
        "url": render_listed_url(record.url),
        "headers": {k: _redact_template(k, v) for k, v in record.headers.items()},
        "isolation": record.isolation,
        "protocol_version": record.protocol_version,
        "enabled": record.enabled,
    }
    if record.problem is not None:
        row["problem"] = {"code": record.problem.code, "message": record.problem.message}
    return row


def render_listed_url(url: str | None) -> str | None:
    """A row's URL as ``--list`` prints it: the user information's password (or a user part alone, which may be
    a token) and every secret query parameter (``redact_url``) as ``***``; the rest byte for byte."""
    if url is None:
        return None
    scheme, separator, rest = url.partition("://")
    if separator:
        end = min((i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0), default=len(rest))
        authority, tail = rest[:end], rest[end:]
        if "@" in authority:
            userinfo, _, host = authority.rpartition("@")
            user, colon, _password = userinfo.partition(":")
            authority = f"{user}:{REDACTED}@{host}" if colon else f"{REDACTED}@{host}"
        url = f"{scheme}://{authority}{tail}"
    return redact_url(url)


def secret_arg_positions(args: Sequence[Any]) -> list[int]:
    """Where a stdio row's ``args`` hold a literal secret: the value after a secret-looking flag (``--token
    VALUE``) or in its ``--flag=VALUE`` form (``is_secret_name`` on the flag's name); a value made only of
    ``${…}`` references holds none."""
    found: list[int] = []
    for index, arg in enumerate(args):
        if not isinstance(arg, str) or not arg.startswith("-"):
            continue
        name, equals, value = arg.partition("=")
        if not is_secret_name(name.lstrip("-")):
            continue
        if not equals and index + 1 < len(args) and isinstance(args[index + 1], str):
            value = args[index + 1]
            if value.startswith("-") and value != "-":
                continue  # another flag: nothing was given after this one
        if ENV_REF.sub("", value).strip():
            found.append(index if equals else index + 1)
    return found


def render_registry_args(args: Any) -> Any:
    """A row's ``args`` as ``--list`` prints them: each literal secret (``secret_arg_positions``) as ``***``."""
    if not isinstance(args, list):
        return args
    shown = list(args)
    for index in secret_arg_positions(args):
        flag, equals, _ = shown[index].partition("=") if shown[index].startswith("-") else ("", "", "")
        shown[index] = f"{flag}={REDACTED}" if equals else REDACTED
    return shown


def _redact_template(name: str, value: Any) -> Any:
    if not isinstance(value, str):
        return REDACTED
    if not is_secret_name(name):
        return value
    literal = ENV_REF.sub("", value).strip().lower()
    return value if literal in ("", "bearer", "basic", "token") else REDACTED


# -- 10.1.2 registry sources: SQLite file and HTTP endpoint (open_registry) --------------------------------------------


@dataclass
class CachedTools:
    """A catalogue kept by a registry source: the tools, the protocol version they came with, when they were
    fetched (unix seconds) and the server's ``ttlMs`` (0: none; ``catalogue_kept_until``)."""

    tools: list[Any]
    protocol_version: str | None
    fetched_at: float
    ttl_ms: int = 0


def _tools_user(server: RegistryServer | str, user_id: str | None) -> tuple[str, str]:
    """The tools-cache key: (server, user), user '' for a public server."""
    if isinstance(server, RegistryServer):
        return server.name, "" if server.isolation == "public" else (user_id or "")
    return server, user_id or ""


class Registry:
    """A registry source. ``view`` is called by many threads at once, for every command; ``load_tools`` /
    ``store_tools`` keep discovered catalogues (here in memory; SQLite also in ``mcp_tools_cache``)."""

    source = "registry"

    def __init__(self, *, log: Log, timeout: float) -> None:
        import threading

        self.log = log
        self.timeout = timeout
        self._lock = threading.Lock()
        self._tools: dict[tuple[str, str], CachedTools] = {}

    def view(
        self, user_id: str | None, access_token: str | None = None, *, timeout: float | None = None
    ) -> RegistryView:
        """This user's view; ``timeout``: the seconds the command has left (default: the registry's timeout),
        which bounds every wait in here, for the lock and for the source alike."""
        raise NotImplementedError

    def _wait(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else max(0.0, min(timeout, self.timeout))

    def load_tools(self, server: RegistryServer | str, user_id: str | None) -> CachedTools | None:
        """The cached catalogue of ``server`` for ``user_id``, or None."""
        with self._lock:
            return self._tools.get(_tools_user(server, user_id))

    def store_tools(
        self, server: RegistryServer | str, user: str | None, tools: list, version: str | None, ttl_ms=0
    ) -> None:
        with self._lock:
            self._tools[_tools_user(server, user)] = CachedTools(list(tools), version, time.time(), ttl_ms)

    def drop_tools(self, server: str, user_id: str) -> None:
        """Forget a catalogue kept in memory (a reaped user's); what the SQLite file holds stays."""
        with self._lock:
            self._tools.pop(_tools_user(server, user_id), None)

    def forget_users(self, users: set[str]) -> None:
        """The reaper forgot these users (no slot left): what is kept in memory for each goes (a user who comes back
        is read again), so that memory follows the users active lately, not every user seen (§13)."""

    def abort(self) -> None:
        """Shutdown: commands waiting for this source stop waiting (``registry_error``); ``close`` follows."""

    def close(self) -> None:
        pass


def _build_view(
    rows: Iterable[Mapping[str, Any]],
    system: Iterable[tuple[Any, Any]],
    user: Iterable[tuple[Any, Any]],
    *,
    source: str,
    log: Log,
) -> RegistryView:
    servers: dict[str, RegistryServer] = {}
    for row in rows:
        name = row.get("name")
        if not isinstance(name, str):
            log.warn(f"{source}: a server row without a name (a string) is ignored", once_key=f"{source}:noname")
            continue
        record = parse_registry_row(row, source=source)
        if name in servers:
            record.problem = InvalidConfigError(f"{source}: server {safe_name(name)!r} is listed more than once")
            servers[name].problem = record.problem
        servers[name] = record
    view = RegistryView(servers)
    for kind, pairs, target in (("system", system, view.system_credentials), ("user", user, view.user_credentials)):
        for server_name, value in pairs:
            if not isinstance(server_name, str):
                continue
            try:
                target[server_name] = parse_credentials(
                    value, where=f"{source}: {kind} credentials of server {safe_name(server_name)!r}"
                )
            except InvalidConfigError as exc:
                view.credential_problems[(kind, server_name)] = exc.copy()  # no traceback kept
    return view


def _file_identity(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def check_registry_file(path: str, log: Log) -> None:
    """An existing registry: a regular file (not ``/dev/null``, a FIFO …); warn once when group/others may read
    it (it holds every user's credentials)."""
    import stat

    try:
        info = os.stat(path)
    except OSError as exc:
        raise RegistryError(f"cannot open the registry {path}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(info.st_mode):
        raise RegistryError(
            f"the registry path is not a regular file: {path}", hint="--registry names a SQLite file (or a URL)"
        )
    if info.st_mode & 0o044:
        log.warn(
            f"the registry {path} holds credentials and is readable by group/others; run chmod 600 on it",
            once_key=f"registry-perms:{path}",
        )


def create_registry_file(path: str) -> bool:
    """A new, empty registry file, mode 0600 (it will hold every user's credentials); False when another
    process created it first."""
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        return False
    except (OSError, ValueError) as exc:
        raise RegistryError(
            f"cannot open the registry {path}: cannot create it ({getattr(exc, 'strerror', None) or exc})"
        ) from None
    return True


class SqliteRegistry(Registry):
    """The embedded registry: one SQLite connection under a lock (``check_same_thread=False``), read in one
    transaction per ``view``, parsed again only when another connection committed (``PRAGMA data_version``)."""

    def __init__(self, path: str, *, log: Log, timeout: float = DEFAULT_TIMEOUT, create: bool = True) -> None:
        super().__init__(log=log, timeout=timeout)
        self.path = path
        self.source = f"registry {path}"
        self._version: Any = None
        self._cached: RegistryView | None = None
        self._users: dict[str, tuple[dict[str, dict[str, str]], dict[tuple[str, str], BkmcpError]]] = {}
        self._store_warned = False
        self._cache_ttl = False  # mcp_tools_cache has the ttl_ms column (``_connect``)
        self._gone_warned = False  # the file's deletion was told (once per deletion)
        self.created = False  # this process created the file (``--resident`` warns: a mistyped path?)
        self._busy_ms = int(timeout * 1000)  # SQLite's busy timeout now (sqlite3.connect sets it to ``timeout``)
        if os.path.isdir(path):
            raise RegistryError(f"the registry path is a directory, not a SQLite file: {path}")
        exists = os.path.exists(path)
        if not create and not exists:
            raise RegistryError(f"registry file not found: {path}", hint="create it with --import mcp.json")
        if exists:
            check_registry_file(path, log)
        else:
            self.created = create_registry_file(path)
        self._db = self._connect()
        self._identity = _file_identity(path)

    def _connect(self) -> Any:
        import sqlite3

        try:
            db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False)
        except (sqlite3.Error, ValueError) as exc:
            raise RegistryError(f"cannot open the registry {self.path}: {exc}") from None
        self._db = db
        try:
            self._ensure_schema()
            # a registry made before the cache kept ttlMs has no such column: its catalogues have no ttlMs
            self._cache_ttl = any(row[1] == "ttl_ms" for row in db.execute("PRAGMA table_info(mcp_tools_cache)"))
        except BaseException:
            db.close()
            raise
        return db

    def _follow_rename(self) -> None:
        """A registry replaced by rename (``mv new.db registry.db``, an atomic deploy) is opened again: the old
        connection would read the old file forever. Under ``_lock``; one ``stat`` per view."""
        identity = _file_identity(self.path)
        if identity is None:  # deleted: the open file still reads, but nothing edits it any more
            if not self._gone_warned:
                self._gone_warned = True
                self.log.warn(
                    f"{self.source}: the file was deleted; still serving its last contents (restore the file, or "
                    "restart the resident with --registry naming the registry)"
                )
            return
        self._gone_warned = False  # back (or replaced): a later deletion is told again
        if identity == self._identity:
            return
        old = self._db
        try:
            self._connect()
        except BaseException:  # the new file is not a registry (yet): this command fails, the next one retries
            self._db = old
            raise
        old.close()
        self._identity = identity
        self._busy_ms = int(self.timeout * 1000)  # the new connection's busy timeout
        self._cached, self._version = None, None
        self._users.clear()
        self.log.warn(f"{self.source}: the file was replaced; reading the new one")

    def _fail(self, exc: Exception, doing: str) -> RegistryError:
        return RegistryError(
            f"cannot {doing} the registry {self.path}: {exc}",
            hint="check that --registry names a bkmcp SQLite registry (docs/contract.md §11.3 schema)",
        )

    def _ensure_schema(self) -> None:
        import sqlite3

        try:
            tables = self._tables()
            if all(t in tables for t in REGISTRY_TABLES):
                return
            if not any(t in tables for t in REGISTRY_TABLES):
                self._db.execute("BEGIN IMMEDIATE")  # two processes creating the same new file: one wins
                try:
                    if not any(t in self._tables() for t in REGISTRY_TABLES):
                        statement = ""
                        for line in REGISTRY_SCHEMA.splitlines(keepends=True):
                            statement += line
                            if sqlite3.complete_statement(statement):
                                self._db.execute(statement)
                                statement = ""
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
                tables = self._tables()
        except sqlite3.Error as exc:
            raise self._fail(exc, "open") from None
        missing = [t for t in REGISTRY_TABLES if t not in tables]
        if missing:
            raise RegistryError(
                f"the registry {self.path} lacks the table(s) {', '.join(missing)}",
                hint="a bkmcp registry has the four tables of docs/contract.md §11.3",
            )

    def _tables(self) -> set[str]:
        return {row[0] for row in self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}

    def _locked(self, seconds: float, doing: str) -> None:
        """Take ``_lock`` within ``seconds`` and let SQLite's busy handler wait at most what is left then: a
        command never waits behind the busy waits of the commands queued before it (docs/resident-registry.md)."""
        started = time.monotonic()
        if not self._lock.acquire(timeout=seconds):
            raise RegistryError(
                f"cannot {doing} the registry {self.path}: it stayed locked for {int(seconds * 1000)} ms",
                hint="another connection holds a write lock on the registry",
            )
        left = max(0.0, seconds - (time.monotonic() - started))
        busy_ms = int(left * 1000)
        if abs(busy_ms - self._busy_ms) > 50:  # one statement, only when the wait differs noticeably
            try:
                # executescript: no transaction is open here, and it keeps no prepared statement (execute would
                # cache one per distinct wait, up to sqlite3's 128)
                self._db.executescript(f"PRAGMA busy_timeout = {busy_ms}")
                self._busy_ms = busy_ms
            except BaseException:
                self._lock.release()
                raise

    def view(
        self, user_id: str | None, access_token: str | None = None, *, timeout: float | None = None
    ) -> RegistryView:
        import sqlite3

        self._locked(self._wait(timeout), "read")
        try:
            self._follow_rename()
            try:
                # parsed already and no other connection committed since: one statement (its own read transaction)
                known = (
                    self._cached is not None
                    and (user_id is None or user_id in self._users)
                    and self._db.execute("PRAGMA data_version").fetchone()[0] == self._version
                )
                if not known:
                    self._read(user_id)
            except sqlite3.Error as exc:
                raise self._fail(exc, "read") from None
            cached = self._cached
            assert cached is not None
            users, problems = self._users[user_id] if user_id is not None else ({}, {})
        finally:
            self._lock.release()
        return RegistryView(
            dict(cached.servers),
            dict(cached.system_credentials),
            dict(users),
            {**cached.credential_problems, **problems},
        )

    def _read(self, user_id: str | None) -> None:
        """Parse the registry again if another connection committed, and this user's credentials if not known;
        in one transaction, under ``_lock``."""
        self._db.execute("BEGIN")
        try:
            version = self._db.execute("PRAGMA data_version").fetchone()[0]
            if self._cached is None or version != self._version:
                columns = ", ".join(REGISTRY_COLUMNS)
                cursor = self._db.execute(f"SELECT {columns} FROM mcp_servers ORDER BY name")
                rows = [dict(zip(REGISTRY_COLUMNS, r)) for r in cursor]
                system = self._db.execute("SELECT server_name, credentials FROM mcp_credentials").fetchall()
                self._cached = _build_view(rows, system, (), source=self.source, log=self.log)
                self._version = version
                self._users.clear()
            if user_id is not None and user_id not in self._users:
                pairs = self._db.execute(
                    "SELECT server_name, credentials FROM mcp_user_credentials WHERE user_id = ?", (user_id,)
                ).fetchall()
                own = _build_view((), (), pairs, source=self.source, log=self.log)
                if len(self._users) >= 4096:
                    self._users.clear()
                self._users[user_id] = (own.user_credentials, own.credential_problems)
        finally:
            self._db.execute("COMMIT")

    def forget_users(self, users: set[str]) -> None:
        with self._lock:
            for user in users:
                self._users.pop(user, None)

    def load_tools(self, server: RegistryServer | str, user_id: str | None) -> CachedTools | None:
        import sqlite3

        key = _tools_user(server, user_id)
        try:
            self._locked(self._wait(_CACHE_WRITE_WAIT), "read")
        except RegistryError:
            return None  # a cache: discover instead of waiting for a lock
        try:
            if key in self._tools:  # written here because the file refused the write (read-only registry)
                return self._tools[key]
            try:
                row = self._db.execute(
                    f"SELECT tools, protocol_version, fetched_at, {'ttl_ms' if self._cache_ttl else '0'} "
                    "FROM mcp_tools_cache WHERE server_name = ? AND user_id = ?",
                    key,
                ).fetchone()
            except sqlite3.Error as exc:
                self.log.debug(f"{self.source}: tools cache not readable: {exc}")
                return None
        finally:
            self._lock.release()
        if row is None:
            return None
        try:
            tools = parse_json(row[0])
        except (JsonInputError, TypeError):
            return None
        if not isinstance(tools, list):
            return None
        return CachedTools(tools, row[1], float(row[2]), row[3] if isinstance(row[3], int) and row[3] > 0 else 0)

    def store_tools(
        self, server: RegistryServer | str, user: str | None, tools: list, version: str | None, ttl_ms=0
    ) -> None:
        """Best effort: a registry that refuses the write (read-only, locked) keeps the catalogue in memory."""
        import sqlite3

        key = _tools_user(server, user)
        self._locked(self._wait(_CACHE_WRITE_WAIT), "write")
        try:
            try:
                ttl = (", ttl_ms", ", ?", (ttl_ms,)) if self._cache_ttl else ("", "", ())
                self._db.execute(
                    "INSERT OR REPLACE INTO mcp_tools_cache (server_name, user_id, tools, protocol_version, "
                    f"fetched_at{ttl[0]}) VALUES (?, ?, ?, ?, ?{ttl[1]})",
                    (*key, dump_json(list(tools)), version, time.time(), *ttl[2]),
                )
                self._tools.pop(key, None)
                return
            except sqlite3.Error as exc:
                if not self._store_warned:
                    self._store_warned = True
                    self.log.warn(f"{self.source}: cannot write the tools cache ({exc}); keeping it in memory")
            self._tools[key] = CachedTools(list(tools), version, time.time(), ttl_ms)
        finally:
            self._lock.release()

    def import_config(self, config: ConfigFile, log: Log) -> list[str]:
        """``--import``: add or replace the file's servers (public; enabled unless the entry says
        ``"disabled": true``), in one transaction (contract.md §11.3)."""
        import sqlite3

        refusal = config.refusal(config.unusable[0][0]) if config.unusable else None
        if refusal is not None:  # an import takes the whole file or nothing
            raise refusal
        for name in config.servers:
            problem = check_registry_name(name)
            if problem:
                raise InvalidConfigError(f"{config.path}: server {safe_name(name)!r} cannot be imported: {problem}")
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for server in config.servers.values():
                        stdio = server.type == "stdio"
                        self._db.execute(
                            f"INSERT INTO mcp_servers ({', '.join(REGISTRY_COLUMNS)}) "
                            "VALUES (?, ?, ?, ?, ?, ?, ?, 'public', ?, ?) ON CONFLICT(name) DO UPDATE SET "
                            + ", ".join(f"{c} = excluded.{c}" for c in REGISTRY_COLUMNS[1:]),
                            (
                                server.name,
                                server.type,
                                server.command if stdio else None,
                                dump_json(list(server.args)) if stdio else None,
                                dump_json(dict(server.env)) if stdio else None,
                                None if stdio else server.url,
                                None if stdio else dump_json(dict(server.headers)),
                                server.protocol_version,
                                0 if server.disabled else 1,
                            ),
                        )
                        self._db.execute("DELETE FROM mcp_tools_cache WHERE server_name = ?", (server.name,))
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise self._fail(exc, "write") from None
        for server in config.servers.values():
            if server.cwd is not None:
                log.warn(f'{config.path}: server {server.name!r}: "cwd" has no registry column and was dropped')
            if server.type == "stdio" and secret_arg_positions(server.args):
                log.warn(
                    f"{config.path}: server {server.name!r}: its args hold a literal secret (after a flag such as "
                    '--token); it is stored in clear in the registry (--list shows it as ***): pass it through "env"'
                )
        return list(config.servers)

    def close(self) -> None:
        with self._lock:
            self._db.close()


class _Flight:
    """One HTTP fetch that concurrent callers for the same (user, token) wait for instead of repeating."""

    def __init__(self) -> None:
        import threading

        self.done = threading.Event()
        self.view: RegistryView | None = None
        self.error: BkmcpError | None = None


class HttpRegistry(Registry):
    """The host platform's registry (contract.md §11.3 "HTTP source"): ``GET <url>?user_id=U`` with ``Authorization:
    Bearer <accessToken>``; without a user, ``GET <url>`` with neither. No redirects, TLS verified, one total
    timeout per fetch. Answers are cached per (user, access token) for ``cache_seconds``; failures are not."""

    def __init__(
        self,
        url: str,
        *,
        log: Log,
        timeout: float = DEFAULT_TIMEOUT,
        cache_seconds: float = REGISTRY_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(log=log, timeout=timeout)
        self.url = url
        self.source = f"registry {strip_url_credentials(url)}"
        self.cache_seconds = cache_seconds
        self._clock = clock
        self._answers: dict[tuple[str | None, str], tuple[float, RegistryView]] = {}
        self._flights: dict[tuple[str | None, str], _Flight] = {}
        self._client: Any = None
        self._aborted = False

    def view(
        self, user_id: str | None, access_token: str | None = None, *, timeout: float | None = None
    ) -> RegistryView:
        import hashlib

        token = (access_token or "") if user_id is not None else ""
        key = (user_id, hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest() if token else "")
        with self._lock:
            if self._aborted:
                raise self._shutting_down()
            hit = self._answers.get(key)
            if hit is not None and self._clock() - hit[0] < self.cache_seconds:
                return _copy_view(hit[1])
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        seconds = self._wait(timeout)
        if not leader:
            if not flight.done.wait(seconds):
                raise RegistryError(f"{self.source} did not answer within {format_duration(seconds)}")
            if self._aborted and flight.view is None:
                raise self._shutting_down()
            if flight.error is not None:
                raise flight.error.copy()
            assert flight.view is not None
            return _copy_view(flight.view)
        try:
            flight.view = self._fetch(user_id, token or None, seconds)
            with self._lock:
                if len(self._answers) >= _REGISTRY_ANSWERS_KEPT:  # bounded, however fast tokens rotate
                    now = self._clock()
                    self._answers = {k: v for k, v in self._answers.items() if now - v[0] < self.cache_seconds}
                    if len(self._answers) >= _REGISTRY_ANSWERS_KEPT:  # all fresh: the older half goes
                        self._answers = dict(list(self._answers.items())[_REGISTRY_ANSWERS_KEPT // 2 :])
                self._answers[key] = (self._clock(), flight.view)
            return _copy_view(flight.view)
        except BkmcpError as exc:
            flight.error = exc.copy()  # what the followers raise copies of
            raise
        except Exception as exc:  # never leave followers waiting on a fetch that died of a bug
            flight.error = RegistryError(f"cannot read {self.source}: {type(exc).__name__}")
            raise
        finally:
            with self._lock:
                self._flights.pop(key, None)
            flight.done.set()

    def _shutting_down(self) -> RegistryError:
        return RegistryError(f"bkmcp shut down before {self.source} answered")

    def abort(self) -> None:
        """Commands waiting for another command's fetch stop now; a fetch in progress is left to end by itself
        (closing its socket from here would not wake it) and its command is answered by the shutdown."""
        with self._lock:
            self._aborted = True
            flights = list(self._flights.values())
        for flight in flights:
            flight.done.set()

    def _http(self) -> Any:
        with self._lock:
            if self._client is None:  # no redirects, no cookies, no proxies or ~/.netrc, TLS verified
                self._client = new_http_client(self.url, insecure=False)
            return self._client

    def _fetch(self, user_id: str | None, token: str | None, seconds: float) -> RegistryView:
        from urllib.parse import quote

        httpx = import_httpx()
        redactor = Redactor()
        target = self.url
        headers = {"Accept": "application/json"}
        if user_id is not None:
            target += ("&" if "?" in target else "?") + "user_id=" + quote(user_id, safe="")
            if token:
                if not token.isascii() or has_control(token) or token != token.strip():
                    raise AuthRequiredError(
                        f"the accessToken for {self.source} is not a valid header value",
                        hint="send the platform's access token unchanged",
                    )
                redactor.add(token)
                headers["Authorization"] = f"Bearer {token}"
        deadline = Deadline(max(seconds, 0.001))
        client = self._http()
        try:
            timeout = httpx.Timeout(deadline.remaining())
            with (
                HttpxBoundary(self.url, deadline),
                client.stream("GET", target, headers=headers, timeout=timeout) as answer,
            ):
                status = answer.status_code
                if 300 <= status < 400:
                    location = answer.headers.get("location", "")
                    where = f" to {strip_url_credentials(location)}" if location else ""
                    raise RegistryError(
                        f"{self.source} answered HTTP {status} (a redirect{where}); redirects are not followed",
                        hint="point --registry at the final URL",
                        details={"http_status": status},
                    )
                if status == 401:
                    raise AuthRequiredError(
                        f"{self.source} rejected the request (HTTP 401): the access token was missing or not accepted",
                        details={"http_status": status},
                        hint="the platform must send the user's valid accessToken",
                    )
                if status == 403:
                    raise PermissionDeniedError(
                        f"{self.source} refused the request (HTTP 403)", details={"http_status": status}
                    )
                if status != 200:
                    raise RegistryError(f"{self.source} answered HTTP {status}", details={"http_status": status})
                chunks: list[bytes] = []
                size = 0
                for chunk in answer.iter_bytes():
                    size += len(chunk)
                    if size > _REGISTRY_ANSWER_LIMIT:
                        raise RegistryError(f"{self.source} sent more than {_REGISTRY_ANSWER_LIMIT} bytes")
                    chunks.append(chunk)
                    deadline.remaining()
        except McpTimeoutError:
            raise RegistryError(f"{self.source} did not answer within {format_duration(seconds)}") from None
        except (ConnectionFailedError, ProtocolError) as exc:  # mapped once, by the transports' boundary
            raise RegistryError(
                f"cannot read {self.source}: {redactor.scrub(exc.message)}",
                hint="is the platform's /internal/mcp/config reachable from here?",
            ) from None
        return self._parse_answer(b"".join(chunks), user_id)

    def _parse_answer(self, body: bytes, user_id: str | None) -> RegistryView:
        try:
            document = parse_json(body)
        except JsonInputError:
            raise RegistryError(f"{self.source} did not answer valid JSON") from None
        servers = document.get("servers") if isinstance(document, dict) else None
        if not isinstance(servers, list):
            raise RegistryError(f'{self.source} answered JSON without a "servers" array')
        system = document.get("system_credentials")
        own = document.get("user_credentials") if user_id is not None else None
        system, own = ({} if system is None else system), ({} if own is None else own)
        if not isinstance(system, dict) or not isinstance(own, dict):
            raise RegistryError(f'{self.source}: "system_credentials" and "user_credentials" must be objects')
        rows = []
        for row in servers:
            if isinstance(row, dict):
                rows.append(row)
            else:
                self.log.warn(
                    f"{self.source}: a server entry that is not an object is ignored", once_key=f"{self.source}:row"
                )
        view = _build_view(rows, system.items(), own.items(), source=self.source, log=self.log)
        view.complete = user_id is None  # a user's answer lists what that user may use, not every server
        return view

    def forget_users(self, users: set[str]) -> None:
        with self._lock:
            for key in [key for key in self._answers if key[0] in users]:
                del self._answers[key]

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


def _copy_view(view: RegistryView) -> RegistryView:
    return RegistryView(
        dict(view.servers),
        dict(view.system_credentials),
        dict(view.user_credentials),
        dict(view.credential_problems),
        view.complete,
    )


def open_registry(
    source: str, *, env: Mapping[str, str], log: Log, timeout: float = DEFAULT_TIMEOUT, cwd: str | None = None
) -> Registry:
    """``--registry SOURCE``: an ``http(s)://…/internal/mcp/config`` URL or a SQLite file path (created with the
    docs/contract.md §11.3 schema if missing). A source that cannot be opened is ``registry_error``."""
    if not source:
        raise RegistryError("--registry needs a SQLite file path or an http(s):// URL")
    scheme, separator, _ = source.partition("://")
    if separator and scheme.lower() in ("http", "https"):
        try:
            check_url("--registry", source)
        except InvalidConfigError as exc:
            raise RegistryError(exc.message.replace('field "url"', "the URL"), hint=exc.hint) from None
        return HttpRegistry(source, log=log, timeout=timeout)
    if separator and scheme.isalpha():
        raise RegistryError(
            f"--registry: unsupported URL scheme {safe_name(scheme)!r}",
            hint="use an http(s):// URL or a SQLite file path",
        )
    path = resolve_user_path(source, env, cwd or os.getcwd(), option="--registry")
    return SqliteRegistry(path, log=log, timeout=timeout)


# -- 10.2 sessions: events, the live session, slots, the pool and its reaper (docs/contract.md §11.5, §11.6) -----------
# The sessions the resident process holds: a public server's shared one, or one user's instance, each a section-7
# McpSession behind a ``ResidentSession``; ``SessionPool`` keys them by (user, server), opens them on demand within the
# process limits, evicts the least recently used idle one, reaps idle and dead ones, and closes all at the end.

DEFAULT_IDLE_TIMEOUT = 600.0
DEFAULT_MAX_PROCESSES = 64
DEFAULT_MAX_USER_PROCESSES = 8
DEFAULT_SHUTDOWN_GRACE = 5.0  # shutdown: how long the commands in flight may still finish on their own
DEFAULT_INPUT_TIMEOUT = 300.0  # --input-timeout: how long a forwarded question waits for the platform's answer
MAX_FORWARDED_QUESTIONS = 8  # questions one user may have waiting for an answer at once (--elicitation forward)
_RESTART_BACKOFF_MAX = 30.0
LINES_CLOSE_WAIT = 2.0  # at the end, what stderr or the --events stream still holds is given up after this long
_KEEPALIVE_IDLE = 5.0  # an HTTP session unused this long has its keep-alive connections closed (the session stays)


def run_each(job: Callable[[Any], None], items: Sequence[Any], *, timeout: float | None = None) -> None:
    """``job(item)`` for every item at once — one thread per server (or session), the first item on the calling
    thread — and return when all are done, or after ``timeout`` seconds (the rest finish on their own: the threads
    are daemons). The one fan-out of the resident mode: ``init``, catalogues of many servers, closing every session."""
    import threading

    threads = [threading.Thread(target=job, args=(item,), name="bkmcp-each", daemon=True) for item in items[1:]]
    for thread in threads:
        thread.start()
    if items:
        job(items[0])
    end = None if timeout is None else time.monotonic() + timeout
    for thread in threads:
        thread.join(None if end is None else max(0.0, end - time.monotonic()))


# -- 10.2.1 events (docs/contract.md §11.6) ----------------------------------------------------------------------------


def _events_dropped(count: int) -> str:
    return dump_json({"ts": round(time.time(), 3), "event": "events.dropped", "count": count}) + "\n"


def build_event_uri(uri: str) -> str:
    """A URI as an event names it (docs/contract.md §11.6): no query string, fragment or user information, which
    may hold what a user typed or a credential."""
    head = uri.split("#", 1)[0].split("?", 1)[0]
    scheme, separator, rest = head.partition("://")
    if separator:
        authority, slash, path = rest.partition("/")
        head = f"{scheme}://{authority.rpartition('@')[2]}{slash}{path}"
    return clip_text(head, 200)


class EventSink:
    """``--events FILE|-``: one JSON line per event, scrubbed. Callers pass names, ids, counts and codes only: never
    argument values.

    Writing never holds a command back (issue 16 item 13): the lines go through a section-2 ``LineWriter`` (the
    operator log's too when both are stderr: ``lines``), so a stream that cannot take a line now gets it from a
    bounded buffer as it drains; a line dropped (the buffer full, a full disk) is counted, and the drops are
    reported once, by one ``events.dropped`` line (``count``) when writing works again."""

    def __init__(
        self,
        stream: IO[str] | None,
        redactor: Redactor,
        *,
        owned: bool = False,
        buffer: int = LINE_BUFFER,
        lines: LineWriter | None = None,
    ) -> None:
        self.redactor = redactor
        self.lines = lines if lines is not None else LineWriter(stream, owned=owned, buffer=buffer)
        self.lines.notes["events"] = _events_dropped

    @property
    def dropped(self) -> int:
        return self.lines.dropped.get("events", 0)

    def emit(self, event: str, **fields: Any) -> None:
        if self.lines.stream is None:
            return
        line = self.redactor.scrub(dump_json({"ts": round(time.time(), 3), "event": event, **fields})) + "\n"
        self.lines.write(line, "events")

    def close(self, wait: float = 2.0) -> None:
        """Write what waits (at most ``wait`` seconds: a stream nobody reads is given up), then close a file we
        opened."""
        self.lines.close(wait)


# -- 10.2.2 one live session: the adapter over the section-7 engine ----------------------------------------------------


class ResidentSession:
    """One live MCP session: a public server's shared one, or one user's instance of a user server.

    The only place resident mode touches the client engine: a section-7 ``McpSession`` opened once and used by
    every command at the same time (requests are multiplexed by id on one stdio pipe or one HTTP session), each
    with its own deadline. Its stdio child runs in its own process group and dies with bkmcp (PR_SET_PDEATHSIG).
    """

    def __init__(
        self,
        server: ResolvedServer,
        *,
        log: Log,
        insecure: bool,
        events: EventSink,
        user_id: str | None,
        forward: bool = False,
    ) -> None:
        self.server = server
        self.forward = forward  # --elicitation forward: it declares elicitation (form) and its questions are asked
        self.log = log
        self.insecure = insecure
        self.events = events
        self.user_id = user_id
        self.pid: int | None = None
        self._session: McpSession | None = None
        self._closed = False
        self._lock = _thread.allocate_lock()  # one open at a time: requests run concurrently
        self._state = _thread.allocate_lock()  # _session and _closed: close() never waits for an open in progress
        self.leases = 0  # commands holding this session now (SessionPool.session .. SessionPool.release)
        self.retired = False  # outdated: no new command gets it; closed when the last lease is released
        self.stopped = False  # close() stopped a child that was still running (it had not exited by itself)

    @property
    def alive(self) -> bool:
        session = self._session
        return session is not None and not self._closed and session.rules is not None and session.alive

    @property
    def era(self) -> str | None:
        """The live session's era, asked each time: a tentative modern one may still turn legacy (contract §5)."""
        return self._session.era if self._session is not None else None

    @property
    def protocol_version(self) -> str | None:
        return self._session.protocol_version if self._session is not None else None

    @property
    def in_flight(self) -> int:
        session = self._session
        return session.in_flight if session is not None else 0

    @property
    def tools_stale(self) -> bool:
        session = self._session
        return bool(session is not None and session.core.tools_stale)

    def _ctx(self, timeout: float, source: InputSource | None = None) -> OpContext:
        return OpContext(Deadline(max(timeout, 0.001)), self.log, input=source)

    def open(self, timeout: float) -> None:
        """Connect and negotiate. A ``close`` meanwhile (a shutdown while the child starts) ends the child and its
        process group at once and this raises."""
        with self._lock:
            with self._state:
                if self._session is not None and not self._closed:
                    return
                if self._closed:
                    raise ConnectionFailedError(
                        f"the session of server {self.server.name!r} was closed", request_sent=False
                    )
                session = McpSession(self.server, insecure=self.insecure, log=self.log, die_with_parent=True)
                session.on_stray, session.on_fell_back = self._stray, self._fell_back
                if self.forward:  # declared only when the platform answers (docs/contract.md §11.2)
                    session.core.client_capabilities = dict(ELICITATION_FORM)
                self._session = session
            try:
                negotiate(session, self._ctx(timeout))
            finally:
                pid = session.transport.stdio.pid if session.transport.stdio is not None else None
                if pid is not None and self.pid is None:
                    self.pid = pid
                    self.events.emit("process.started", server=self.server.name, user=self.user_id, pid=pid)
            if self._closed:
                raise ConnectionFailedError(
                    f"bkmcp closed the session of server {self.server.name!r} while it started", request_sent=False
                )

    def _stray(self, stray: Stray) -> None:
        """A response that answers no request in flight (``Stray``): an event, besides the operator log's warning."""
        self.events.emit("response.stray", server=self.server.name, user=self.user_id, reason=stray.why)

    def _fell_back(self) -> None:
        """The tentative modern era turned legacy (contract §5): its ``protocol.initialized`` again, now legacy."""
        session = self._session
        if session is not None:
            self.events.emit(
                "protocol.initialized",
                server=self.server.name,
                user=self.user_id,
                version=session.protocol_version,
                era=session.era,
            )

    def _require(self) -> McpSession:
        session = self._session
        if session is None or not self.alive:
            raise ConnectionFailedError(f"server {self.server.name!r} is not connected", request_sent=False)
        return session

    def list_tools(self, timeout: float) -> tuple[list[dict[str, Any]], int]:
        """The usable catalogue (in the modern era without the tools whose x-mcp-header is invalid, contract.md §5)
        and its ``ttlMs`` (``catalogue_kept_until`` says what it means)."""
        session, ctx = self._require(), self._ctx(timeout)
        tools, _pages, ttl_ms = discover_catalogue(session, ctx)
        usable, _excluded = usable_tools(session, ctx, tools)
        return usable, ttl_ms

    def call_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        timeout: float,
        tool: dict[str, Any] | None,
        source: InputSource | None = None,
        pending: InputRound | None = None,
    ) -> dict[str, Any]:
        """``source``: who answers the server's questions (--elicitation forward); ``pending``: a round it answers."""
        return call_tool(self._require(), self._ctx(timeout, source), name, arguments, tool, pending)

    # resources and prompts: the CLI's own section-7 paths (--resources, --read, --prompts, --prompt), one each

    def list_resources(self, timeout: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        return list_resources(self._require(), self._ctx(timeout))

    def read_resource(
        self, uri: str, timeout: float, source: InputSource | None = None, pending: InputRound | None = None
    ) -> dict[str, Any]:
        return read_resource(self._require(), self._ctx(timeout, source), uri, pending)

    def list_prompts(self, timeout: float) -> list[dict[str, Any]]:
        return list_prompts(self._require(), self._ctx(timeout))

    def get_prompt(
        self,
        name: str,
        arguments: Mapping[str, str],
        timeout: float,
        source: InputSource | None = None,
        pending: InputRound | None = None,
    ) -> dict[str, Any]:
        """``prompts/get`` once the arguments passed the prompt's declaration (``check_prompt_arguments``)."""
        ctx = self._ctx(timeout, source)
        result = get_prompt(
            self._require(), ctx, name, lambda p: check_prompt_arguments(p, arguments), pending=pending
        )[1]
        assert result is not None
        return result

    def with_skills(self, work: Callable[[McpSession, OpContext], Any], timeout: float) -> Any:
        """``work(session, ctx)`` on a session that declares the skills extension (SEP-2640), and on its requests
        only (docs/contract.md §11.2 "Skills"): a 2026-07-28 session declares per request, so this kept one does,
        in the ``_meta`` of this command's requests alone; a legacy session declared its capabilities at
        ``initialize`` (none), so the command gets its own session, negotiated with the extension and closed at
        its end, on the same resolved server (the user's credentials)."""
        session, ctx = self._require(), self._ctx(timeout)
        if session.era == "modern":
            ctx.declares = SKILLS_CAPABILITIES
            return work(session, ctx)
        own = McpSession(self.server, insecure=self.insecure, log=self.log, die_with_parent=True)
        own.core.client_capabilities = SKILLS_CAPABILITIES
        try:
            negotiate(own, ctx)
            return work(own, ctx)
        finally:
            own.close(Deadline(2.0))

    def list_skills(self, timeout: float) -> list[dict[str, Any]]:
        return self.with_skills(lambda session, ctx: [describe_skill(e) for e in list_skills(session, ctx)], timeout)  # type: ignore[no-any-return]

    def read_skill(self, name: str, timeout: float) -> dict[str, Any]:
        return self.with_skills(lambda session, ctx: load_skill(session, ctx, name), timeout)  # type: ignore[no-any-return]

    def declares(self, capability: str) -> bool:
        """Whether the server declared ``capability`` (``resources``, ``prompts``) when it was negotiated."""
        session = self._session
        return session is not None and declares_capability(session, capability)

    def close_idle_connections(self) -> int:
        """HTTP: close the keep-alive connections no request uses (the session stays); stdio: nothing."""
        session = self._session
        return session.transport.close_idle_connections() if session is not None else 0

    def exit_status(self) -> int | None:
        stdio = self._session.transport.stdio if self._session is not None else None
        return stdio.exit_status if stdio is not None else None

    def close(self) -> None:
        """Idempotent; ends the session and stops the child (stdin, SIGTERM, SIGKILL), reaping its group. Does not
        wait for an ``open`` in progress: its negotiation fails at once (a child already spawned is stopped)."""
        with self._state:
            if self._closed:
                return
            self._closed = True
            session = self._session
        if session is None:
            return
        running = self.pid is not None and self.exit_status() is None  # else it exited by itself, or never ran
        try:
            session.close(Deadline(2.0))
        except Exception as exc:  # closing never raises into the resident loop
            self.log.debug(f"closing server {self.server.name!r} failed: {type(exc).__name__}")
        self.stopped = running
        if self.pid is not None:
            self.events.emit(
                "process.exited",
                server=self.server.name,
                user=self.user_id,
                pid=self.pid,
                status=self.exit_status(),
                stopped=running,
            )


# -- 10.2.3 slots and limits (docs/contract.md §11.5) ------------------------------------------------------------------


@dataclass(frozen=True)
class SlotResolution:
    """A slot's last resolution: the registry row and the credential it was made from, the server they resolve to
    and its fingerprint (``ResolvedServer.identity``); reused while the row and the credential stay equal."""

    row: RegistryServer
    credential: dict[str, str]
    server: ResolvedServer
    fingerprint: str


class Slot:
    """Where one session lives: the shared one of a public server (user ``""``) or one user's instance."""

    def __init__(self, user: str, server: str, isolation: str) -> None:
        import threading

        self.user = user
        self.server = server
        self.isolation = isolation
        self.session: ResidentSession | None = None
        self.fingerprint = ""
        self.transport = ""
        self.last_used = time.monotonic()
        self.users = 0  # commands using this slot now
        self.opening = False
        self.tools: list[dict[str, Any]] | None = None
        self.tools_version: str | None = None
        self.fresh_until: float | None = None  # the catalogue's freshness (catalogue_kept_until); None: until changed
        # (the catalogue, its tools' definitions per model family): shaped once per catalogue (section 10.3)
        self.shaped: tuple[list[dict[str, Any]], dict[int, Any]] | None = None
        self.failures = 0  # failures in a row, crashes and failed starts (reset by a successful operation)
        self.retry_at = 0.0
        self.failure: BkmcpError | None = None  # the last of them: what an answer inside the back-off quotes
        self.last_error: BkmcpError | None = None
        self.open_lock = threading.Lock()
        self.trimmed = 0.0  # when the reaper last closed the idle keep-alive connections of its HTTP session
        self.resolved: SlotResolution | None = None  # the last resolution for this slot
        self.resources: bool | None = None  # its server declared resources at its last open (None: not opened yet)
        self.questions = 0  # forwarded questions waiting for the platform's answer (10.2.6): never reaped meanwhile


def slot_fingerprint(slot: Slot, server: ResolvedServer) -> str:
    """``server.identity()`` with nothing more: a slot already is one registry row (its name), this process's
    environment and ``--insecure`` never change, so a changed resolution (URL, headers, the user's credential in
    them, …) is what makes a new connection. Kept on the slot when ``server`` is its last resolution."""
    kept = slot.resolved
    return kept.fingerprint if kept is not None and kept.server is server else server.identity()


def _open_file_limit() -> int | None:
    """The soft RLIMIT_NOFILE, or None where it cannot be read (unlimited, not POSIX)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - not POSIX
        return None
    return None if soft == resource.RLIM_INFINITY else int(soft)


def build_http_session_limit(max_processes: int, open_files: int | None) -> int:
    """Live HTTP sessions in all (docs/resident.md, "Limits"): 4 per allowed child, and no more than half of the
    descriptors left once 64 are kept for bkmcp and 3 (its pipes) for each allowed child; at least 8."""
    limit = 4 * max_processes
    if open_files is not None:
        limit = min(limit, (open_files - 64 - 3 * max_processes) // 2)
    return max(8, limit)


# -- 10.2.4 whose secrets scrub what (docs/contract.md §11.5 "Secrets") ------------------------------------------------
# No redaction oracle: the process-wide redactor (the operator's log and events) knows the system secrets only,
# bounded; a session's log adds that session's own; an answer is scrubbed with its command's own secrets.

RESIDENT_SYSTEM_SECRETS = 1024  # system secrets the process-wide redactor keeps (least recently seen go first)


def learn_system_secrets(system: Redactor, view: Any, row: Any, server: ResolvedServer) -> None:
    """Teach the process-wide redactor a row's system secrets: its system credential (used by a public server,
    the default of a user server) and, for a public server, everything its resolution holds. A user's own
    credential never goes there (it would blank that value in every other user's text)."""
    for key, value in (view.system_credentials.get(row.name) or {}).items():
        system.add(value, whole=is_secret_name(key))
    if row.isolation == "public":
        system.learn(server.redactor)


def build_session_redactor(system: Redactor, server: ResolvedServer) -> Redactor:
    """A session's log lines (``-v`` lines, its child's stderr): its own secrets plus the system ones."""
    redactor = Redactor(base=system)
    redactor.learn(server.redactor)
    return redactor


def build_command_redactor(
    system: Redactor,
    access_token: str | None,
    servers: Iterable[ResolvedServer],
    credentials: Iterable[Mapping[str, Mapping[str, str]]] = (),
) -> Redactor:
    """What a command's answer is scrubbed with: the system secrets, the command's access token, the user's own
    and the system credentials of its registry view, and the secrets of the servers it resolved; nobody else's."""
    redactor = Redactor(base=system)
    if access_token:
        redactor.add(access_token, whole=False)
    for by_server in credentials:
        for credential in by_server.values():
            for key, value in credential.items():
                redactor.add(value, whole=is_secret_name(key))
    for server in servers:
        redactor.learn(server.redactor)
    return redactor


# -- 10.2.5 the pool: SessionPool, its limits, eviction and reaper; the crash back-off ---------------------------------


@dataclass
class ResidentOptions:
    """The ``--resident`` command line, checked. Section 11's ``build_resident_options`` makes it and is the one
    place that knows each option's default."""

    registry: str
    events: str | None
    max_processes: int
    max_user_processes: int
    idle_timeout: float
    timeout: float
    insecure: bool
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE  # --shutdown-grace (0: cut at once)
    inject_resource_tools: bool = False  # --inject-resource-tools: list_tools adds a resource-reading tool per server
    max_blob_bytes: int = MAX_BLOB_BYTES  # --max-blob-bytes: read_resource's blobs with include_blobs
    elicitation: str = "off"  # --elicitation forward: a server's questions go to the platform (contract §11.2)
    input_timeout: float = DEFAULT_INPUT_TIMEOUT  # --input-timeout: how long a forwarded question waits for its answer


def build_backoff_error(server: str, cause: BkmcpError, failures: int, wait_ms: int) -> BkmcpError:
    """The answer to a use of ``server`` inside its back-off: the last failure's code and message (a copy), with
    ``restarts`` (failures in a row) and ``retry_after_ms``; nothing was sent."""
    return cause.copy(
        message=f"server {server!r} is backing off after {cause.code}: {cause.message} ({failures} failures in a "
        f"row); the next attempt is allowed in {wait_ms} ms",
        details={**cause.details, "restarts": failures, "retry_after_ms": wait_ms},
        hint=None,
        notes=(),
        remedy=None,
        what=None,
        budget=None,
        data=None,
        request_sent=False,
    )


class SessionPool:
    """Every live session of the resident process, keyed by (user or "", server); limits, LRU eviction,
    idle reaping, crash restarts with back-off, the tools cache."""

    def __init__(
        self, opts: ResidentOptions, *, registry: Registry, log: Log, events: EventSink, env: Mapping[str, str]
    ) -> None:
        import threading

        self.opts = opts
        self.registry = registry
        self.log = log
        self.events = events
        self.env = env
        self.inherited_env = select_inherited_env(env)
        self._slots: dict[tuple[str, str], Slot] = {}
        self._opening: set[ResidentSession] = set()  # sessions whose open is in progress (close_all ends them too)
        self._lock = threading.Lock()
        self._closed = threading.Condition(self._lock)  # a session left ``_closing``: its place is free
        self._stop = threading.Event()
        self._reaper: Any = None
        self._retiring: set[ResidentSession] = set()  # retired sessions still serving calls
        # Sessions taken off their slot whose child may still run (retired, disconnected, reaped, being closed):
        # counted against the limits until their close returned -> (transport, user of a per-user session)
        self._closing: dict[ResidentSession, tuple[str, str | None]] = {}
        self._public: dict[str, Slot] = {}  # the public servers' slots, by server name (also in ``_slots``)
        # users the reaper forgot (no slot left) and when it decided so (monotonic)
        self.on_users_gone: Callable[[set[str], float], None] | None = None
        self.on_reap: Callable[[], None] | None = None  # each reaper round first (the forwarded questions' expiry)
        self.http_limit = build_http_session_limit(opts.max_processes, _open_file_limit())
        self._closers: set[Any] = set()  # threads closing retired sessions (close_all waits for them)

    # -- the registry view -------------------------------------------------------------------------

    def resolve(self, view: Any, row: Any, user: str | None, credential: dict[str, str]) -> ResolvedServer:
        """The server as this user may reach it (``credential``: the one its command chose); a public server never
        gets the user's credentials."""
        user_id = user if row.isolation == "user" else None
        server = resolve_registry_server(
            row, view=view, user_id=user_id, env=self.env, inherited_env=self.inherited_env, credential=credential
        )
        learn_system_secrets(self.log.redactor, view, row, server)
        server.child_output_in_errors = row.isolation != "public"  # a shared child's output may hold anyone's data
        return server

    def use_server(
        self, view: Any, row: Any, user: str | None, chosen: dict[str, dict[str, str]]
    ) -> tuple[Slot, ResolvedServer]:
        """The slot of this user's session of ``row`` and ``resolve``'s server. Resolving is a function of the row,
        the chosen credential and the process environment only, so the slot keeps its last result and reuses it
        while the row and the credential are equal to those it was made from. ``chosen``: the command's credentials
        by server name; ``select_credential`` chooses one only for a server the command has not used yet."""
        slot = self.peek(user, row)
        kept = slot.resolved if slot is not None else None
        if kept is None or not (kept.row is row or kept.row == row):
            kept = None  # a row resolved before was checked then: only the credential may differ since
            check_registry_row(row)
        credential = self.choose_credential(view, row, user, chosen)
        if slot is not None and kept is not None and credential == kept.credential:
            return slot, kept.server
        server = self.resolve(view, row, user, credential)
        slot = self.slot(user, row)
        slot.resolved = SlotResolution(row, credential, server, server.identity())
        return slot, server

    @staticmethod
    def choose_credential(view: Any, row: Any, user: str | None, chosen: dict[str, dict[str, str]]) -> dict[str, str]:
        """The command's credential for a checked ``row``: chosen once per command (``select_credential``) and
        kept in ``chosen`` (the command's, by server name), whichever action asks first."""
        credential = chosen.get(row.name)
        if credential is None:
            user_id = user if row.isolation == "user" else None
            credential = chosen[row.name] = select_credential(row, view=view, user_id=user_id)
        return credential

    def slot(self, user: str | None, row: Any) -> Slot:
        key = ((user or "") if row.isolation == "user" else "", row.name)
        with self._lock:
            slot = self._slots.get(key)
            if slot is None:
                slot = self._slots[key] = Slot(key[0], row.name, row.isolation)
                if row.isolation == "public":
                    self._public[row.name] = slot
            return slot

    def retire_gone(self, view: Any) -> None:
        """Retire the shared sessions whose public row this view shows disabled, broken or (a complete view)
        deleted, and forget their slots: their children end once their calls are done and free their places under
        ``--max-processes`` (docs/contract.md §11.5). A row unchanged since it was resolved costs one lookup."""
        gone = []
        with self._lock:
            for name, slot in self._public.items():
                row = view.servers.get(name)
                kept = slot.resolved
                if kept is not None and row is kept.row:
                    continue
                if (row is None and view.complete) or (
                    row is not None and (not row.enabled or row.problem is not None or row.isolation != "public")
                ):
                    gone.append(slot)
            for slot in gone:
                del self._public[slot.server]
                self._slots.pop(("", slot.server), None)
        for slot in gone:
            session = slot.session
            if session is not None:
                with slot.open_lock:
                    self.retire(slot, session)
            slot.tools = None

    def peek(self, user: str | None, row: Any) -> Slot | None:
        key = ((user or "") if row.isolation == "user" else "", row.name)
        with self._lock:
            return self._slots.get(key)

    def _register(self, slot: Slot) -> bool:
        """Under ``_lock``: put back a slot the reaper (or ``retire_gone``) forgot after a command found it, so
        whatever it opens is counted, reaped and closed at shutdown; False when another slot took its place."""
        key = (slot.user, slot.server)
        found = self._slots.setdefault(key, slot)
        if found is slot and slot.isolation == "public":
            self._public.setdefault(slot.server, slot)
        return found is slot

    # -- opening, limits ---------------------------------------------------------------------------

    def _live(self, kind: str = "stdio") -> tuple[int, dict[str, int]]:
        total = 0
        per_user: dict[str, int] = {}
        for k, user in self._closing.values():  # off their slot, their child not stopped yet
            if k == kind:
                total += 1
                if user is not None:
                    per_user[user] = per_user.get(user, 0) + 1
        for slot in self._slots.values():
            if slot.transport == kind and (slot.opening or (slot.session is not None)):
                total += 1
                if slot.isolation == "user":
                    per_user[slot.user] = per_user.get(slot.user, 0) + 1
        return total, per_user

    def _evictable(self, user: str | None, kind: str = "stdio") -> list[Slot]:
        found = [
            s
            for s in self._slots.values()
            if s.isolation == "user"
            and s.transport == kind
            and s.session is not None
            and not s.opening
            and s.users == 0
            and s.session.leases == 0
            and s.session.in_flight == 0
            and (user is None or s.user == user)
        ]
        return sorted(found, key=lambda s: s.last_used)

    def _stopping(self, scope: str | None, kind: str) -> bool:
        """Under ``_lock``: whether a session of ``kind`` (of user ``scope``, or anyone's) is being closed now, its
        calls done: its place is free once its child is stopped, which takes seconds at most."""
        return any(
            k == kind and (scope is None or user == scope) and session not in self._retiring
            for session, (k, user) in self._closing.items()
        )

    def _reserve(self, slot: Slot, server: ResolvedServer, timeout: float) -> None:
        """Room for one more child, by evicting the least recently used idle user session if needed, or by waiting
        (within ``timeout``) for a child being stopped to be gone."""
        victims: list[ResidentSession] = []
        kind = server.type
        most = self.opts.max_processes if kind == "stdio" else self.http_limit
        end = time.monotonic() + timeout
        with self._lock:
            slot.transport = kind
            if kind in ("stdio", "http"):
                while True:
                    total, per_user = self._live(kind)
                    if slot.isolation == "user" and per_user.get(slot.user, 0) >= self.opts.max_user_processes:
                        limit, live, scope = self.opts.max_user_processes, per_user.get(slot.user, 0), slot.user
                    elif total >= most:
                        limit, live, scope = most, total, None
                    else:
                        break
                    candidates = self._evictable(scope, kind)
                    left = end - time.monotonic()
                    if not candidates and left > 0 and self._stopping(scope, kind):
                        self._closed.wait(left)
                        continue
                    if not candidates:
                        if kind == "stdio":
                            which = "--max-user-processes" if scope is not None else "--max-processes"
                            what = "server processes"
                        else:
                            which = "--max-user-processes" if scope is not None else "the HTTP session limit"
                            what = "HTTP sessions"
                        raise ResourceLimitError(
                            f"too many live {what} ({live} of {which} {limit}); none is idle",
                            details={
                                "limit": limit,
                                "live": live,
                                "scope": "user" if scope is not None else "all",
                                "kind": kind,
                            },
                        )
                    victim = candidates[0]
                    self.log.debug(f"evicting the idle session of {victim.server!r} (least recently used)")
                    if victim.session is not None:
                        victims.append(victim.session)
                    victim.session = None
            slot.opening = True
        for session in victims:  # not counted meanwhile: ``slot`` holds its place, and opens once it is closed
            session.close()

    def session(
        self, slot: Slot, server: ResolvedServer, timeout: float, *, budget: float | None = None
    ) -> ResidentSession:
        """The live session of ``slot``, opened (or reopened after a crash, a config change) on demand within
        ``timeout`` (what is left of the command's configured ``budget``, which a timeout's message names; by
        default ``timeout`` itself), with a lease the caller gives back with ``release``. A session made from an
        outdated row or credential is retired (``retire``): this command and the next ones get a new one, calls in
        flight on it finish."""
        with slot.open_lock:
            session = slot.session
            fingerprint = slot_fingerprint(slot, server)
            if session is not None and not session.alive:
                self.detach(slot, session)
                self.crashed(slot, session)
                session = None
            elif session is not None and slot.fingerprint != fingerprint:
                self.retire(slot, session)
                session = None
            if session is not None:
                with self._lock:
                    slot.last_used = time.monotonic()
                    session.leases += 1
                return session
            self._check_open()
            now = time.monotonic()
            if now < slot.retry_at:
                wait_ms = int((slot.retry_at - now) * 1000) + 1
                cause = slot.failure or ConnectionFailedError("the server failed")
                raise build_backoff_error(slot.server, cause, slot.failures, wait_ms)
            if slot.fingerprint != fingerprint:
                slot.tools = None
            with self._lock:
                registered = self._register(slot)
            if not registered:  # forgotten and replaced meanwhile: never open a session nobody would close
                raise ConnectionFailedError(
                    f"the session of server {slot.server!r} was replaced meanwhile; retry", request_sent=False
                )
            self._reserve(slot, server, timeout)
            session = ResidentSession(
                server,
                log=self.log.scoped(build_session_redactor(self.log.redactor, server)),
                insecure=self.opts.insecure,
                events=self.events,
                user_id=slot.user or None,
                forward=self.opts.elicitation == "forward",
            )
            with self._lock:
                if self._stop.is_set():
                    slot.opening = False
                    self._check_open()
                self._opening.add(session)
            try:
                session.open(timeout)
            except BaseException as exc:
                session.close()
                with self._lock:
                    slot.opening = False
                if isinstance(exc, BkmcpError):
                    failure = exc
                    if isinstance(exc, McpTimeoutError) and exc.what is not None:  # the budget set, not what was left
                        said = timeout if budget is None else budget
                        failure = exc.copy(message=f"{exc.what} within {format_duration(said)}", budget=said)
                    slot.last_error = failure
                    if isinstance(exc, ProtocolError):
                        self.events.emit(
                            "protocol.rejected", server=slot.server, user=slot.user or None, error_code=exc.code
                        )
                    if session.pid is not None:
                        self.crashed(slot, session, failure)
                    if failure is not exc:
                        raise failure from exc.__cause__
                raise
            finally:
                with self._lock:
                    self._opening.discard(session)
            self.events.emit(
                "protocol.initialized",
                server=slot.server,
                user=slot.user or None,
                version=session.protocol_version,
                era=session.era,
            )
            with self._lock:
                stopped = self._stop.is_set()
                if not stopped:
                    slot.session, slot.fingerprint = session, fingerprint
                slot.opening = False
            if stopped:  # close_all ran while this one was opening: it must not outlive the shutdown
                session.close()
                self._check_open()
            with self._lock:
                slot.last_error = None
                slot.last_used = time.monotonic()
                slot.resources = session.declares("resources")  # --inject-resource-tools asks (Catalogues)
                session.leases += 1
            return session

    def release(self, session: ResidentSession) -> None:
        """A command is done with the session ``session()`` gave it; the last one out closes a retired session."""
        with self._lock:
            session.leases -= 1
            last = session.retired and session.leases <= 0 and session in self._retiring
            if last:
                self._retiring.discard(session)
        if last:
            self._close_later(session)

    def lend(
        self, slot: Slot, session: ResidentSession, work: Callable[[], Any], failed: Callable[[BkmcpError], None]
    ) -> Any:
        """``work()`` on ``session`` (leased by ``session()``), given back however it ends: a success resets the
        slot's failures in a row; a failure is told to ``failed`` (its event) and drops a session whose child died
        (``after_failure``), then raised as it is."""
        try:
            result = work()
        except BkmcpError as exc:
            self.release(session)
            failed(exc)
            self.after_failure(slot, session)
            raise
        except BaseException:
            self.release(session)
            raise
        self.release(session)
        slot.failures = 0
        return result

    def retire(self, slot: Slot, session: ResidentSession) -> None:
        """The ``disconnect_server`` way of ending an outdated session: new commands get a new session at once,
        commands holding this one finish (each bounded by its own timeout), then the last one closes it."""
        with self._lock:
            if slot.session is session:
                slot.session = None
            if session.retired:
                return
            session.retired = True
            self._set_closing(slot, session)
            idle = session.leases <= 0
            if not idle:
                self._retiring.add(session)
        self.log.debug(f"retiring the outdated session of {slot.server!r}")
        if idle:
            self._close_later(session)

    def _close_later(self, session: ResidentSession) -> None:
        """Close on a thread of its own (stopping a child takes a while), which ``close_all`` waits for."""
        import threading

        def close() -> None:
            try:
                self._close_counted(session)
            finally:
                with self._lock:
                    self._closers.discard(thread)

        thread = threading.Thread(target=close, name="bkmcp-close", daemon=True)
        with self._lock:
            self._closers.add(thread)
        thread.start()

    def use(self, slot: Slot, delta: int) -> None:
        """A command starts (1) or stops (-1) using ``slot``: a slot in use is never evicted or reaped."""
        with self._lock:
            slot.users += delta
            slot.last_used = time.monotonic()
            if delta > 0:
                self._register(slot)

    def _check_open(self) -> None:
        if self._stop.is_set():
            raise ConnectionFailedError("the resident process is shutting down", request_sent=False)

    def crashed(self, slot: Slot, session: ResidentSession, cause: BkmcpError | None = None) -> None:
        """A failure that damps the next attempts (failures in a row: none, then 1 s doubling up to
        ``_RESTART_BACKOFF_MAX``): a child that ended while in use, or a start that failed with ``cause`` (a
        protocol or handshake failure: then bkmcp stopped the child). The warning, in the session's scrubbed log,
        names the cause; "exited" is said only of a child that exited by itself (docs/contract.md §11.5)."""
        if cause is None:
            cause = ConnectionFailedError(
                "the server's output ended while its process ran"
                if session.stopped
                else f"the server's process exited (status {session.exit_status()})"
            )
        slot.failures += 1
        delay = 0.0 if slot.failures <= 1 else min(_RESTART_BACKOFF_MAX, 2.0 ** (slot.failures - 2))
        slot.retry_at = time.monotonic() + delay
        slot.failure = cause
        stopped = "; bkmcp stopped its process" if session.stopped else ""
        when = "next attempt on next use" if delay == 0 else f"backing off: next attempt allowed in {delay:g}s"
        session.log.warn(f"server {slot.server!r} failed ({cause.code}: {cause.message}){stopped}; {when}")

    def _set_closing(self, slot: Slot, session: ResidentSession) -> None:
        """Under ``_lock``: ``session`` leaves ``slot`` but its child still counts until ``_close_counted``, so no
        command opens a process in a place not yet free (the limits hold however many open at once)."""
        self._closing[session] = (slot.transport, slot.user if slot.isolation == "user" else None)

    def _close_counted(self, session: ResidentSession) -> None:
        try:
            session.close()
        finally:
            with self._lock:
                self._closing.pop(session, None)
                self._closed.notify_all()

    def detach(self, slot: Slot, session: ResidentSession) -> None:
        with self._lock:
            if slot.session is session:
                slot.session = None
                self._set_closing(slot, session)
        self._close_counted(session)

    def after_failure(self, slot: Slot, session: ResidentSession) -> None:
        """A call failed: a session whose child died is dropped now (the next use restarts it)."""
        if not session.alive and slot.session is session:
            self.detach(slot, session)
            self.crashed(slot, session)

    def disconnect(self, slot: Slot, timeout: float) -> None:
        """Close the slot's session once the calls in flight on it finished (bounded by ``timeout``)."""
        with slot.open_lock:
            session = slot.session
            with self._lock:
                slot.session = None
                if session is not None:
                    self._set_closing(slot, session)
        if session is None:
            return
        end = time.monotonic() + timeout
        while (session.in_flight > 0 or session.leases > 0) and time.monotonic() < end:
            time.sleep(0.02)
        self._close_counted(session)

    # -- idle reaping ------------------------------------------------------------------------------

    def start_reaper(self) -> None:
        import threading

        self._reaper = threading.Thread(target=self._reap_loop, name="bkmcp-reaper", daemon=True)
        self._reaper.start()

    def _reap_loop(self) -> None:
        interval = min(1.0, self.opts.idle_timeout / 4)
        while not self._stop.wait(interval):
            try:
                self.reap_once()
            except Exception as exc:  # the reaper must outlive any one failure
                self.log.debug(f"reaper: {type(exc).__name__}")

    def reap_once(self) -> None:
        if self.on_reap is not None:
            self.on_reap()
        now = time.monotonic()
        keepalive = min(_KEEPALIVE_IDLE, self.opts.idle_timeout / 2)
        idle, dead, quiet = [], [], []
        with self._lock:
            for slot in self._slots.values():
                session = slot.session
                if (
                    session is None
                    or slot.opening
                    or slot.users
                    or slot.questions
                    or session.leases
                    or session.in_flight
                ):
                    continue
                if not session.alive:
                    dead.append((slot, session))
                elif slot.isolation == "user" and now - slot.last_used >= self.opts.idle_timeout:
                    idle.append((slot, session))
                elif slot.transport == "http" and now - slot.last_used >= keepalive and slot.trimmed < slot.last_used:
                    slot.trimmed = now
                    quiet.append(session)
        for session in quiet:  # an idle HTTP session keeps no socket open (docs/resident.md, "Limits")
            session.close_idle_connections()
        for slot, session in idle:
            with slot.open_lock:
                if slot.session is session and slot.users == slot.questions == 0 and session.in_flight == 0:
                    self.log.debug(f"closing the idle session of {slot.server!r}")
                    self.detach(slot, session)
        for slot, session in dead:
            with slot.open_lock:
                if slot.session is session:
                    self.detach(slot, session)
                    self.crashed(slot, session)
        self._forget_idle(now)

    def _forget_idle(self, now: float) -> None:
        """Forget the user slots idle for ``--idle-timeout`` without a session (their catalogues, resolutions and
        last errors with them) and the in-memory tools cache of each; tell ``on_users_gone`` which users have no
        slot left. So memory depends on the users active lately, not on every user ever seen (§13)."""
        forgotten = []
        with self._lock:
            for key, slot in list(self._slots.items()):
                if (
                    slot.isolation == "user"
                    and slot.session is None
                    and not slot.opening
                    and slot.users == 0
                    and now - slot.last_used >= self.opts.idle_timeout
                    and now >= slot.retry_at
                ):
                    del self._slots[key]
                    forgotten.append(slot)
            if not forgotten:
                return
            remaining = {slot.user for slot in self._slots.values() if slot.isolation == "user"}
        for slot in forgotten:
            self.registry.drop_tools(slot.server, slot.user)
        gone = {slot.user for slot in forgotten} - remaining
        if gone:
            self.registry.forget_users(gone)  # its per-user memory (credentials, answers)
            if self.on_users_gone is not None:
                self.on_users_gone(gone, now)

    def close_all(self) -> None:
        """Shutdown: close every session, live or still opening (its child's whole process group is reaped too),
        and refuse to open any more."""
        with self._lock:
            self._stop.set()
            sessions = [s.session for s in self._slots.values() if s.session is not None]
            sessions += list(self._retiring) + list(self._opening)
            self._retiring.clear()
            for slot in self._slots.values():
                slot.session = None
            closing = list(self._closers)
        run_each(lambda session: session.close(), sessions)
        for thread in closing:  # retired sessions being closed already
            thread.join()
        if self._reaper is not None:
            self._reaper.join(2.0)


# -- 10.2.6 forwarded questions: rounds kept for the platform's resume (docs/contract.md §11.2) -----------------------


class HeldCall:
    """A request run on its own thread while its server may ask mid-call (a legacy ``elicitation/create`` held
    open, ``InputSource.hold``): the command waiting for it sees either a question or its end (``wait``)."""

    def __init__(self) -> None:
        import threading

        self._cond = threading.Condition()
        self.questions: list[tuple[dict[str, Any], Callable[[dict[str, Any]], None]]] = []
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None

    def start(self, work: Callable[[], Any]) -> None:
        import threading

        def run() -> None:
            result, error = None, None
            try:
                result = work()
            except BaseException as exc:  # handed to the command that waits (``outcome``)
                error = exc
            with self._cond:
                self.result, self.error, self.finished = result, error, True
                self._cond.notify_all()

        threading.Thread(target=run, name="bkmcp-asking", daemon=True).start()

    def ask(self, request: Mapping[str, Any], reply: Callable[[dict[str, Any]], None]) -> None:
        with self._cond:
            self.questions.append((dict(request), reply))
            self._cond.notify_all()

    def wait(self, deadline: Deadline) -> tuple[dict[str, Any], Callable[[dict[str, Any]], None]] | None:
        """The next question (request, reply), or None once the request ended (``outcome``); ``mcp_timeout`` when
        ``deadline`` passes first (the request goes on within its own budget)."""
        with self._cond:
            while not self.questions and not self.finished:
                left = deadline.left()
                if left <= 0:
                    raise McpTimeoutError(
                        f"no answer within {int(deadline.seconds * 1000)} ms",
                        details={"outcome": "unknown"},
                    )
                self._cond.wait(left)
            return self.questions.pop(0) if self.questions and not self.finished else None

    def outcome(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.result


@dataclass
class ForwardedRound:
    """A server's question the platform answers later (``--elicitation forward``): whose it is (the user, the slot
    and the very session instance that asked), the action and request it belongs to, the round and its expiry."""

    resume: str
    user: str | None
    slot: Slot
    session: ResidentSession
    action: str
    method: str
    params: dict[str, Any]
    round: InputRound
    expires: float
    task_id: str
    given: dict[str, Any]  # answers a resume gave to some of its questions: kept, the next resume adds the rest
    held: HeldCall | None = None  # a legacy question held open: the request still in flight that asked it
    reply: Callable[[dict[str, Any]], None] | None = None  # sends the held question's answer


class ForwardedQuestions:
    """The rounds waiting for the platform's answer, by resume handle (random, never derived from the state): at
    most ``per_user`` per user (``input_pending_limit`` beyond), each kept ``ttl`` seconds (``--input-timeout``),
    then forgotten with an ``input.expired`` event. A slot holding one is never reaped (``Slot.questions``). A
    resume is taken once, and only by its user, on the action and server instance that asked
    (``input_resume_invalid`` otherwise, the same for an unknown, expired or another user's handle)."""

    def __init__(self, ttl: float, per_user: int, events: EventSink) -> None:
        self.ttl, self.per_user, self.events = ttl, per_user, events
        self._lock = _thread.allocate_lock()
        self._rounds: dict[str, ForwardedRound] = {}

    def keep(
        self,
        command: Any,  # a ResidentCommand (10.3.3)
        slot: Slot,
        session: ResidentSession,
        method: str,
        params: Mapping[str, Any],
        pending: InputRound,
        given: Mapping[str, Any],
        held: HeldCall | None = None,
        reply: Callable[[dict[str, Any]], None] | None = None,
    ) -> dict[str, Any]:
        """Keep ``pending`` (with the answers ``given`` to some of its questions): what the answer says about it
        (``resume``, ``expires_in_ms``)."""
        import secrets

        self.sweep()
        with self._lock:
            count = sum(1 for r in self._rounds.values() if r.user == command.user_id)
            if count >= self.per_user:
                raise InputPendingLimitError(
                    f"{method}: the server asks a question, and this user already has {count} waiting for an answer "
                    f"(at most {self.per_user}); answer or let them expire first",
                    details={"limit": self.per_user, "outcome": "not_completed"},
                )
            resume = "in-" + secrets.token_urlsafe(24)
            self._rounds[resume] = ForwardedRound(
                resume,
                command.user_id,
                slot,
                session,
                command.action,
                method,
                dict(params),
                pending,
                time.monotonic() + self.ttl,
                command.task_id,
                dict(given),
                held,
                reply,
            )
            slot.questions += 1
        self.events.emit(
            "input.requested",
            server=slot.server,
            user=command.user_id,
            task_id=command.task_id,
            method=method,
            questions=len(pending.requests),
        )
        return {"resume": resume, "expires_in_ms": int(self.ttl * 1000)}

    def take(self, command: Any, server_name: str, target: str) -> ForwardedRound:
        """The round ``command``'s ``resume`` names, taken (once) when it is this user's, of this action, server
        and tool, prompt or URI (``target``), or ``input_resume_invalid``."""
        self.sweep()
        resume = command.params.get("resume")
        with self._lock:
            found = self._rounds.get(resume) if isinstance(resume, str) else None
            if (
                found is None
                or found.user != command.user_id
                or found.action != command.action
                or server_name != found.slot.server
                or target != found.params.get("uri", found.params.get("name"))
            ):
                raise InputResumeInvalidError(
                    "the resume handle is unknown, expired, already used, or not this user's for this action",
                    details={"outcome": "not_sent"},
                )
            del self._rounds[found.resume]
            found.slot.questions -= 1
        self.events.emit(
            "input.answered",
            server=found.slot.server,
            user=command.user_id,
            task_id=command.task_id,
            method=found.method,
            answers=len(command.params.get("input_responses") or {}),
        )
        return found

    def sweep(self) -> None:
        """Forget the rounds past their expiry (an ``input.expired`` event each; nothing is sent to the server)."""
        now = time.monotonic()
        with self._lock:
            gone = [r for r in self._rounds.values() if r.expires <= now]
            for r in gone:
                del self._rounds[r.resume]
                r.slot.questions -= 1
        for r in gone:
            if r.reply is not None:  # a legacy question held open: answered cancel, never decline
                r.reply({"action": "cancel"})
            self.events.emit("input.expired", server=r.slot.server, user=r.user, task_id=r.task_id, method=r.method)


class ResidentInput(InputSource):
    """Who answers a server's questions in resident mode with ``--elicitation forward``: the platform. A first
    request has no answer at hand, so its round is kept (``keep``) and answered ``input_required``; a resume answers
    exactly the round it took (``answering``) with the platform's ``input_responses``, and any later round is kept
    again. A legacy mid-call question is held open (``hold``) for the command that waits on ``held``."""

    capabilities = ELICITATION_FORM

    def __init__(
        self,
        keep: Callable[[str, Mapping[str, Any], InputRound, Mapping[str, Any]], dict[str, Any]],
        answering: InputRound | None = None,
        responses: Mapping[str, Any] | None = None,
    ) -> None:
        self.keep, self.answering, self.responses = keep, answering, dict(responses or {})
        self.held = HeldCall()

    def hold(self, request: Mapping[str, Any], reply: Callable[[dict[str, Any]], None]) -> bool:
        self.held.ask(request, reply)
        return True

    def answer(self, key: str | None, request: Mapping[str, Any], several: bool) -> InputAnswer:
        if request.get("method") != "elicitation/create":
            return InputAnswer(None, unsupported=str(request.get("method")))
        round_ = self.answering
        if key is None or round_ is None or round_.requests.get(key) is not request:
            return InputAnswer(None)
        given = self.responses.get(key)
        return InputAnswer(dict(given) if isinstance(given, dict) else None)

    def park(self, method: str, params: Mapping[str, Any], pending: InputRound, era: str | None) -> dict[str, Any]:
        """A round kept; the same round partly answered keeps the answers given (only the rest is asked again)."""
        given = {k: v for k, v in self.responses.items() if k in pending.requests} if pending is self.answering else {}
        return self.keep(method, params, pending, given)


class AskedAnswer(dict):  # type: ignore[type-arg]
    """An action's ``input_required`` answer (``answer_or_ask``): a success answer, not the server's result."""


def answer_or_ask(work: Callable[[], Any]) -> Any:
    """``work()``; a round that was kept (its ``InputRequiredError`` has a ``resume``) becomes the platform's
    ``{"status": "input_required", "input_requests", "resume", "expires_in_ms"}`` (docs/contract.md §11.2)."""
    try:
        return work()
    except InputRequiredError as exc:
        data = exc.data or {}
        if not data.get("resume"):
            raise
        return AskedAnswer(
            status="input_required",
            input_requests=data.get("input_requests") or {},
            resume=data["resume"],
            expires_in_ms=data.get("expires_in_ms"),
        )


# -- 10.3 injected names and catalogues (docs/contract.md §11.2 TOOL, §11.5) -------------------------------------------
# What the platform hands its models: every tool a user may use as ``mcp_{server}_{tool}`` with a model-ready
# definition, from the catalogues ``Catalogues`` keeps per session (its slot, the registry's cache, discovery);
# ``ResidentCommand`` is shared with the command server below, whose ``platform_error`` words their errors.


# -- 10.3.1 injected names: mcp_{server}_{tool}, shortened past 64 characters ------------------------------------------

_INJECTED_MAX = 64
_INJECTED_PREFIX = 55


# --inject-resource-tools: a server's resource-reading tool is the pair (server, None), named as a tool called
# ``read_resource``; its hash input, "resources/read" NUL server, is no real pair's (a server name has no "/").
RESOURCE_READER_TOOL = "read_resource"


def _injected_suffixed(base: str, server: str, tool: str | None) -> str:
    import hashlib

    key = f"{server}\0{tool}" if tool is not None else f"resources/read\0{server}"
    digest = hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{base[:_INJECTED_PREFIX]}_{digest}"


def build_injected_names(pairs: Iterable[tuple[str, str | None]]) -> dict[str, tuple[str, str | None]]:
    """Injected tool names (docs/contract.md §11.5) for every ``(server, tool)`` a user sees: name -> (server, tool).

    ``mcp_{server}_{tool}`` with every character outside ``[A-Za-z0-9_-]`` replaced by ``_``; a name longer than
    64 characters, or equal to another tool's name, becomes its first 55 characters + ``_`` + 8 hex digits of
    sha256(server + NUL + tool), and so does every member of a colliding group. A name therefore depends only
    on the tool and on which other tools are in ``pairs``, never on their order. ``(server, None)`` is the server's
    resource-reading tool (``RESOURCE_READER_TOOL``), which collides like any tool: with a tool of that name too.
    """
    import collections

    unique = sorted(set(pairs), key=lambda pair: (pair[0], pair[1] is not None, pair[1] or ""))
    bases = {
        (server, tool): "".join(
            ch if ch.isascii() and (ch.isalnum() or ch in "_-") else "_"
            for ch in f"mcp_{server}_{RESOURCE_READER_TOOL if tool is None else tool}"
        )
        for server, tool in unique
    }
    groups = collections.Counter(bases.values())
    suffixed = {pair for pair, base in bases.items() if len(base) > _INJECTED_MAX or groups[base] > 1}
    while True:  # a suffixed name equal to another tool's plain name: that tool is suffixed too
        names = {pair: (_injected_suffixed(bases[pair], *pair) if pair in suffixed else bases[pair]) for pair in unique}
        taken = {names[pair] for pair in suffixed}
        clash = {pair for pair in unique if pair not in suffixed and names[pair] in taken}
        if not clash:
            break
        suffixed |= clash
    table: dict[str, tuple[str, str | None]] = {}
    for pair in unique:
        name = names[pair]
        if name in table:  # two tools share a 55-character prefix and 32 bits of sha256: never guess
            raise InternalError(f"injected tool names collide after hashing: {name}")
        table[name] = pair
    return table


# -- 10.3.2 model-ready definitions: one tool's schema shaped for each model family ------------------------------------
# A server's inputSchema is JSON Schema of any draft; each model API accepts its own subset. ``build_definitions``
# writes it once per catalogue (``Slot.shaped``) for four families, by the table in docs/resident.md ("Definitions
# for each model family"); the rules come from each family's official definition, read on 2026-12-04:
#   OpenAI    openai/openai-openapi openapi.yaml @f85dbe22 (2026-08-21), FunctionObject (parameters: a JSON Schema
#             object); strict mode's subset is only linked there, to
#             platform.openai.com/docs/guides/structured-outputs#supported-schemas, whose list is used
#   (strict)  and OpenAI's own converters agree on its rules (additionalProperties false on every object, false
#             only; every property required; no root anyOf or nullable root; object keywords without a type make
#             an object; allOf, oneOf, uniqueItems, min/maxProperties, prefixItems, if/then/else, not,
#             patternProperties unsupported; arrays need items): openai/openai-node src/lib/transform.ts @7b7d6ca7
#             (2026-08-21), openai/openai-agents-python src/agents/strict_schema.py + tests @7f7a44f8
#             (2026-08-22), openai/openai-python src/openai/lib/_pydantic.py @e43b4224 (2026-08-21). They do not
#             settle formats, minLength/maxLength or default (passed through, never said accepted), the limits;
#             they keep $ref/$defs (recursion too), which bkmcp inlines (a recursive schema: no strict form)
#   Anthropic anthropics/anthropic-sdk-python src/anthropic/types/tool_param.py @009b0353 (2026-08-07), generated
#             from Anthropic's OpenAPI spec (input_schema: JSON Schema 2020-12, type "object" required)
#   Gemini    googleapis/googleapis google/ai/generativelanguage/v1beta/content.proto @bc7e3baa (2025-12-18),
#             FunctionDeclaration and Schema (an OpenAPI 3.0 subset; enum only for Type.STRING)
# Shaping only ever narrows or loosens what a model may send: ``call_tool`` still validates against the original
# inputSchema (a loosened constraint is said in the description and checked there) after
# ``build_call_arguments`` drops the nulls strict mode makes a model send for optional fields.

SHAPE_FAMILIES = ("function", "function_strict", "anthropic", "gemini")
_SHAPE_RECURSION = 2  # times one $ref is written out along a path before an open object stands in for it
_SHAPE_DEPTH = 24  # schema nesting written out at most (the same open object beyond it)
_SHAPE_NODES = 20000  # schemas written for one tool at most: beyond it every family is left out
_JS_SAFE_INTEGER = 9007199254740991  # zod's integer bounds: no constraint a model needs to hear about
_SHAPE_DROPPED = frozenset(
    ("$schema", "$id", "$anchor", "$dynamicAnchor", "$comment", "$defs", "definitions", "$vocabulary", "examples")
    + ("deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema")
)
# schema-valued keywords no family below takes: dropped, the description saying the server checks more
_SHAPE_UNFOLLOWED = frozenset(
    ("not", "if", "then", "else", "contains", "propertyNames", "dependentSchemas", "dependencies")
    + ("patternProperties", "unevaluatedProperties", "unevaluatedItems", "dependentRequired")
)
_STRICT_FORMATS = frozenset(("date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"))
_STRICT_KEYWORDS = {  # OpenAI Structured Outputs, "Supported properties" per type
    "string": ("pattern", "format"),
    "number": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "integer": ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
    "array": ("minItems", "maxItems"),
}
_OBJECT_KEYWORDS = ("properties", "required", "additionalProperties", "minProperties", "maxProperties")
_STRICT_LIMITS = (5000, 10, 1000, 120000)  # properties, nesting levels, enum values, characters of names and values
_GEMINI_FORMATS = {"string": ("date-time", "enum"), "number": ("float", "double"), "integer": ("int32", "int64")}
_GEMINI_KEYWORDS = {  # Gemini Schema fields per type (beside type, description, nullable, enum, anyOf)
    "string": ("minLength", "maxLength", "pattern"),
    "number": ("minimum", "maximum"),
    "integer": ("minimum", "maximum"),
    "array": ("minItems", "maxItems"),
    "object": ("minProperties", "maxProperties"),
}
_GEMINI_NAME = r"[A-Za-z_][A-Za-z0-9_]{0,63}"  # a parameter name Gemini accepts (FunctionDeclaration.parameters)
_JSON_TYPES = ("string", "number", "integer", "boolean", "array", "object", "null")
_CONSTRAINT_WORDS = {  # keyword -> how a description says it, when a family has no keyword for it
    "minLength": "at least {} characters",
    "maxLength": "at most {} characters",
    "pattern": "matching the pattern {}",
    "format": "format: {}",
    "minimum": "at least {}",
    "maximum": "at most {}",
    "exclusiveMinimum": "greater than {}",
    "exclusiveMaximum": "less than {}",
    "multipleOf": "a multiple of {}",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "uniqueItems": "items unique",
    "minProperties": "at least {} keys",
    "maxProperties": "at most {} keys",
    "default": "default: {}",
    "const": "exactly {}",
    "enum": "one of: {}",
}


class _Unfit(Exception):
    """A schema one family cannot take without changing its meaning (the reason is its message)."""


def _schema_map(schema: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = schema.get(key)
    return value if isinstance(value, dict) else {}


def _schema_list(schema: Mapping[str, Any], key: str) -> list[Any]:
    value = schema.get(key)
    return value if isinstance(value, list) else []


def _words(keyword: str, value: Any) -> str:
    if keyword == "uniqueItems":
        return "items unique" if value is True else ""
    if keyword == "enum" and isinstance(value, list):
        return "one of: " + ", ".join(short_text(v, 60) for v in value[:50]) + (", …" if len(value) > 50 else "")
    return _CONSTRAINT_WORDS[keyword].format(short_text(value, 80))


def _described(schema: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """``schema`` with ``notes`` (constraints its family cannot write as keywords) appended to its description."""
    notes = [n for n in notes if n]
    if not notes:
        return schema
    text = schema.get("description")
    text = text if isinstance(text, str) else ""
    joined = "; ".join(dict.fromkeys(notes))
    return {**schema, "description": f"{text} ({joined})" if text else f"({joined})"}


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    """The JSON types ``schema`` itself names (``type``, else its ``enum``/``const`` values; its branches are
    not looked into), names that are no JSON type left out; [] for any value."""
    return [t for t in json_member_types(schema, unions=False) if t in _JSON_TYPES]


class _Expander:
    """An inputSchema with its local references written inline (bounded), annotations no family needs dropped,
    ``allOf`` of objects merged, unfollowed keywords said in the description and ±2^53-1 bounds dropped."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.work = SchemaWork()  # one budget for the whole tool: references it uses again are followed once
        self.nodes = 0
        self.cut: list[str] = []  # why parts were left open (recursion, depth, unresolvable $ref)

    def open(self, schema: Mapping[str, Any], why: str) -> dict[str, Any]:
        self.cut.append(why)
        note = {"description": schema["description"]} if isinstance(schema.get("description"), str) else {}
        return _described({"type": "object", **note}, [why])

    def expand(self, schema: Any, refs: tuple[str, ...] = (), depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > _SHAPE_NODES:
            raise _Unfit(f"its inputSchema written out inline is larger than {_SHAPE_NODES} schemas")
        if schema is True or not isinstance(schema, dict):
            return {}
        ref = schema.get("$ref")
        if isinstance(ref, str) and refs.count(ref) >= _SHAPE_RECURSION or depth > _SHAPE_DEPTH:
            return self.open(
                schema,
                "recursive: deeper levels are not described"
                if depth <= _SHAPE_DEPTH
                else f"nested deeper than {_SHAPE_DEPTH} levels: not described",
            )
        if not schema.keys().isdisjoint(INLINED_KEYWORDS):
            resolved, why = resolve_schema(schema, self.root, work=self.work)
            if self.work.too_large:  # no family can take a part this large: the tool is not described
                raise _Unfit(f"not described: {self.work.too_large}")
            if why:
                return self.open(schema, f"not described: {why}")
            schema = resolved if isinstance(resolved, dict) else {}
            refs = (*refs, ref) if isinstance(ref, str) else refs
        out: dict[str, Any] = {}
        notes: list[str] = []
        for key, value in schema.items():
            if key in _SHAPE_DROPPED:
                continue
            if key in _SHAPE_UNFOLLOWED:
                notes.append("further conditions are checked by the server")
            elif (
                key in ("minimum", "maximum")
                and not isinstance(value, bool)
                and value in (_JS_SAFE_INTEGER, -_JS_SAFE_INTEGER)
            ):
                continue
            elif key == "properties" and isinstance(value, dict):
                out[key] = {name: self.expand(sub, refs, depth + 1) for name, sub in value.items()}
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                out[key] = self.expand(value, refs, depth + 1)
            elif key in ("anyOf", "oneOf", "allOf", "prefixItems") and isinstance(value, list):
                out[key] = [self.expand(sub, refs, depth + 1) for sub in value]
            elif key == "items" and isinstance(value, list):  # draft-04 tuples
                out["prefixItems"] = [self.expand(sub, refs, depth + 1) for sub in value]
            else:
                out[key] = value
        return _described(_merged_all_of(out), notes)


def _merged_all_of(schema: dict[str, Any]) -> dict[str, Any]:
    """``allOf`` whose branches only add properties, ``required`` and annotations, merged into ``schema``."""
    branches = schema.get("allOf")
    if not isinstance(branches, list):
        return schema
    merged = {k: v for k, v in schema.items() if k != "allOf"}
    for branch in branches:
        if not isinstance(branch, dict):
            return schema
        for key, value in branch.items():
            if key == "properties" and isinstance(value, dict) and isinstance(merged.get(key, {}), dict):
                clash = [n for n in value if n in merged.get(key, {}) and merged[key][n] != value[n]]
                if clash:
                    return schema
                merged[key] = {**merged.get(key, {}), **value}
            elif key == "required" and isinstance(value, list):
                merged[key] = list(dict.fromkeys([*merged.get(key, []), *value]))
            elif key == "description" and key in merged:
                continue
            elif key in merged and merged[key] != value:
                return schema
            else:
                merged[key] = value
    return merged


def _top_object(schema: dict[str, Any]) -> dict[str, Any]:
    """The expanded inputSchema as one ``type: object`` schema every family takes at the top: ``anyOf``/``oneOf``
    of objects become one object with every branch's properties (a field required by every branch stays
    required; the alternatives are said in the description); a missing type or a type list with ``object``
    becomes ``object``. Raises ``_Unfit`` for a schema that admits no object (the arguments are one)."""
    notes: list[str] = []
    for keyword in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(keyword)
        if not isinstance(branches, list):
            continue
        objects = [b for b in branches if isinstance(b, dict) and "object" in (_schema_types(b) or ["object"])]
        if not objects:
            raise _Unfit(f"its inputSchema's {keyword} admits no object")
        properties = dict(_schema_map(schema, "properties"))
        sets = []
        for branch in objects:
            for name, sub in _schema_map(branch, "properties").items():
                properties.setdefault(name, sub)
            sets.append([r for r in _schema_list(branch, "required") if isinstance(r, str)])
        required = [r for r in _schema_list(schema, "required") if isinstance(r, str)]
        if keyword == "allOf":
            required += [r for s in sets for r in s]
        else:
            required += [r for r in sets[0] if all(r in s for s in sets)]
            shapes = "; ".join(f"({i}) " + (", ".join(s) if s else "no required field") for i, s in enumerate(sets, 1))
            notes.append(f"the arguments match one of {len(sets)} forms, by required fields: {shapes}")
        schema = {k: v for k, v in schema.items() if k not in (keyword, "required", "properties")}
        schema["properties"] = properties
        if required:
            schema["required"] = list(dict.fromkeys(required))
    types = _schema_types(schema)
    if types and "object" not in types:
        raise _Unfit(f"its inputSchema admits no object (type {short_text(schema.get('type'), 40)})")
    for key in ("enum", "const"):
        if key in schema:
            notes.append(_words(key, schema.pop(key)))
    schema["type"] = "object"
    return _described(schema, notes)


def _strict_family(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAI Structured Outputs (``strict: true``): every property required (optional ones nullable),
    ``additionalProperties: false`` on every object, supported keywords only, within its size limits."""
    counts = [0, 0, 0, 0]  # properties, deepest nesting, enum values, characters
    shaped = _strict_node(schema, True, 1, counts)
    for count, limit, what in zip(
        counts, _STRICT_LIMITS, ("properties", "nesting levels", "enum values", "characters of names and enum values")
    ):
        if count > limit:
            raise _Unfit(f"more than {limit} {what} (strict mode's limit)")
    return shaped


def _strict_node(schema: Any, required: bool, level: int, counts: list[int]) -> dict[str, Any]:
    if not isinstance(schema, dict):
        raise _Unfit("a subschema is not an object")
    counts[1] = max(counts[1], level)
    notes: list[str] = []
    base = {k: schema[k] for k in ("description",) if isinstance(schema.get(k), str)}
    if "allOf" in schema:
        raise _Unfit("allOf of schemas that do not merge has no strict form")
    branches = schema.get("anyOf", schema.get("oneOf"))
    if isinstance(branches, list):
        if "oneOf" in schema:
            notes.append("exactly one of the alternatives")
        shaped = [_strict_node(b, True, level, counts) for b in branches]
        if not required and not any(b.get("type") == "null" for b in shaped):
            shaped.append({"type": "null"})
        if not shaped:
            raise _Unfit("an empty anyOf admits no value")
        return _described({**base, "anyOf": shaped}, notes)
    # object keywords without a type: an object, as OpenAI's converters read it (openai-node's hasObjectShape)
    types = _schema_types(schema) or (["object"] if not schema.keys().isdisjoint(_OBJECT_KEYWORDS) else [])
    if not types:
        raise _Unfit("a value of any type has no strict form (strict mode needs a type everywhere)")
    nullable = "null" in types or not required
    kinds = [t for t in types if t != "null"]
    if len(kinds) > 1:
        alternatives = [_strict_node({**schema, "type": t}, True, level, counts) for t in kinds]
        if nullable:
            alternatives.append({"type": "null"})
        return _described({**base, "anyOf": alternatives}, notes)
    kind = kinds[0] if kinds else "null"
    out: dict[str, Any] = {"type": kind, **base}
    allowed = _STRICT_KEYWORDS.get(kind, ())
    for key, value in schema.items():
        if key in ("type", "description", "title", "anyOf", "oneOf", "properties", "items", "required"):
            continue
        if key == "additionalProperties" or key == "prefixItems":
            continue
        if key == "format" and value not in _STRICT_FORMATS:
            notes.append(_words(key, value))
        elif key in allowed:
            out[key] = value
        elif key == "enum" and isinstance(value, list):
            out["enum"] = list(value)
            counts[2] += len(value)
            counts[3] += sum(len(v) for v in value if isinstance(v, str))
        elif key == "const":
            out["const"] = value
        elif key in _CONSTRAINT_WORDS:
            notes.append(_words(key, value))
    if kind == "array":
        if "prefixItems" in schema or not isinstance(schema.get("items"), dict):
            raise _Unfit("an array of items of any type (or a tuple) has no strict form")
        out["items"] = _strict_node(schema["items"], True, level + 1, counts)
    elif kind == "object":
        properties = _schema_map(schema, "properties")
        extra = schema.get("additionalProperties", True)
        if not properties and extra is not False and level > 1:  # at the top: a tool without parameters
            raise _Unfit("an object with free-form keys has no strict form (strict mode needs every key named)")
        if "additionalProperties" in schema and extra is not False:  # true and {} too (openai-agents-python)
            raise _Unfit(f"an object with {'named and ' if properties else ''}free-form keys has no strict form")
        wanted = _schema_list(schema, "required")
        missing = [r for r in wanted if r not in properties]
        if missing and extra is False:
            raise _Unfit(f"it requires {short_text(missing[0])}, which it does not allow")
        counts[0] += len(properties)
        counts[3] += sum(len(n) for n in properties)
        out["properties"] = {n: _strict_node(s, n in wanted, level + 1, counts) for n, s in properties.items()}
        out["required"] = list(properties)
        out["additionalProperties"] = False
    if nullable and kind != "null":
        out["type"] = [kind, "null"]
        if "const" in out:
            out["enum"] = [out.pop("const")]
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    else:
        out["type"] = kind
    return _described(out, notes)


def _gemini_family(schema: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini's ``FunctionDeclaration.parameters``: an OpenAPI 3.0 subset ``Schema`` (upper-case types,
    ``nullable``, string ``enum`` only, no ``additionalProperties``/``$ref``); None for no parameters."""
    shaped = _gemini_node(schema)
    if not shaped.get("properties") and shaped.keys() <= {"type", "description"}:
        return None  # "For function with no parameters, this can be left unset"
    return shaped


def _gemini_node(schema: Any) -> dict[str, Any]:
    import re

    if not isinstance(schema, dict):
        raise _Unfit("a subschema is not an object")
    notes: list[str] = []
    base = {k: schema[k] for k in ("description",) if isinstance(schema.get(k), str)}
    if "allOf" in schema:
        raise _Unfit("allOf of schemas that do not merge has no Gemini form")
    branches = schema.get("anyOf", schema.get("oneOf"))
    types = _schema_types(schema)
    if isinstance(branches, list) or not types:
        alternatives = branches if isinstance(branches, list) else [{"type": t} for t in _JSON_TYPES if t != "integer"]
        if "oneOf" in schema:
            notes.append("exactly one of the alternatives")
        nullable = not isinstance(branches, list) or any(
            isinstance(b, dict) and _schema_types(b) == ["null"] and "enum" not in b for b in alternatives
        )
        kept = [_gemini_node(b) for b in alternatives if not (isinstance(b, dict) and _schema_types(b) == ["null"])]
        if not kept:
            return _described({**base, "type": "OBJECT", "nullable": True}, [*notes, "always null"])
        if len(kept) == 1:
            return _described({**kept[0], **base, **({"nullable": True} if nullable else {})}, notes)
        return _described({**base, "anyOf": kept, **({"nullable": True} if nullable else {})}, notes)
    kinds = [t for t in types if t != "null"]
    nullable = "null" in types
    if len(kinds) > 1:
        return _gemini_node(
            {**base, "anyOf": [{**schema, "type": t} for t in kinds] + ([{"type": "null"}] if nullable else [])}
        )
    if not kinds:
        return _described({**base, "type": "OBJECT", "nullable": True}, ["always null"])
    kind = kinds[0]
    out: dict[str, Any] = {**base, "type": kind.upper()}
    allowed = _GEMINI_KEYWORDS.get(kind, ())
    for key, value in schema.items():
        if key in ("type", "description", "title", "properties", "items", "required", "additionalProperties"):
            continue
        if key == "format" and value in _GEMINI_FORMATS.get(kind, ()):
            out[key] = value
        elif key in allowed and (
            isinstance(value, str) if key == "pattern" else isinstance(value, int) and not isinstance(value, bool)
        ):  # content.proto: pattern a string, the others int64 (minimum/maximum a double: integers kept)
            out[key] = value
        elif (
            key == "enum"
            and kind == "string"
            and isinstance(value, list)
            and value
            and all(isinstance(v, str) for v in value)
        ):
            out["enum"] = list(value)  # "Possible values of the element of Type.STRING" only
        elif key == "const" and kind == "string" and isinstance(value, str):
            out["enum"] = [value]
        elif key in _CONSTRAINT_WORDS:
            notes.append(_words(key, value))
        elif key == "prefixItems":
            notes.append("a tuple: " + ", ".join(types_words(_schema_types(s)) for s in value if isinstance(s, dict)))
    if kind == "array" and isinstance(schema.get("items"), dict):
        out["items"] = _gemini_node(schema["items"])
    elif kind == "object":
        properties = _schema_map(schema, "properties")
        for name in properties:
            if not re.fullmatch(_GEMINI_NAME, name):
                raise _Unfit(f"parameter name {short_text(name)} is not [A-Za-z_][A-Za-z0-9_]{{0,63}}")
        if properties:
            out["properties"] = {n: _gemini_node(s) for n, s in properties.items()}
        wanted = _schema_list(schema, "required")
        if [r for r in wanted if r in properties]:
            out["required"] = [r for r in wanted if r in properties]
        if [r for r in wanted if r not in properties]:
            notes.append("also requires " + ", ".join(short_text(r) for r in wanted if r not in properties))
    if nullable:
        out["nullable"] = True
    return _described(out, notes)


def build_definitions(tool: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """One tool's parameters for each family (``SHAPE_FAMILIES``; Gemini's may be None: no parameters) and, for
    a family it is left out of, why. Pure; called once per catalogue (``Slot.shaped``)."""
    schema = tool.get("inputSchema")
    if not isinstance(schema, dict):
        schema = {"type": "object", "properties": {}}
    reasons: dict[str, str] = {}
    try:
        expander = _Expander(schema)
        top = _top_object(expander.expand(schema))
    except _Unfit as exc:
        return {}, dict.fromkeys(SHAPE_FAMILIES, str(exc))
    # OpenAI (non-strict), Anthropic: JSON Schema, an object on top
    shaped: dict[str, Any] = {"function": top, "anthropic": top}
    for family, build in (("function_strict", _strict_family), ("gemini", _gemini_family)):
        try:
            if family == "function_strict" and expander.cut:  # an open object stands in for part of it
                raise _Unfit(f"part of it has no strict form ({expander.cut[0]})")
            shaped[family] = build(top)
        except _Unfit as exc:
            reasons[family] = str(exc)
    return shaped, reasons


def _argument_shapes(schema: Any, root: Any, kind: str, work: SchemaWork, depth: int = 0) -> list[dict[str, Any]]:
    """The (resolved) schemas an object (``kind``) or array value may match: ``schema`` itself when it describes
    one, and its ``anyOf``/``oneOf`` branches that admit that kind."""
    if isinstance(schema, dict) and not schema.keys().isdisjoint(INLINED_KEYWORDS):
        schema, _ = resolve_schema(schema, root, work=work)
    if not isinstance(schema, dict) or depth > REF_DEPTH_LIMIT:
        return []
    key = "properties" if kind == "object" else "items"
    found = [schema] if isinstance(schema.get(key), dict) else []
    branches = schema.get("anyOf", schema.get("oneOf"))
    for branch in branches if isinstance(branches, list) else []:
        if isinstance(branch, dict) and kind in (json_member_types(branch) or [kind]):
            found += _argument_shapes(branch, root, kind, work, depth + 1)
    return found


def _excludes_null(schema: Any, root: Any, work: SchemaWork) -> bool:
    resolved, _ = resolve_schema(schema, root, work=work) if isinstance(schema, dict) else (schema, "")
    types = json_member_types(resolved)
    return bool(types) and "null" not in types


def build_call_arguments(
    schema: Any, arguments: Any, root: Any = None, *, deadline: Deadline | None = None, work: SchemaWork | None = None
) -> Any:
    """``arguments`` without the nulls a strict-mode model sends for fields the original ``schema`` makes
    optional and not nullable (the field left out, as the server's schema means it); nothing else changed. For a
    tool with a strict definition only (``do_call_tool``; docs/contract.md §11.2).
    Follows ``properties`` and ``items`` through local references and the ``anyOf``/``oneOf`` branches that
    admit the value (a null is left out when no branch requires that field or admits null for it); the input
    is never modified. Bounded like ``resolve_schema`` (one ``SchemaWork`` for the call, checking ``deadline``):
    a part too large to follow drops nothing."""
    root = schema if root is None else root
    work = SchemaWork(deadline) if work is None else work
    if isinstance(arguments, dict):
        shapes = _argument_shapes(schema, root, "object", work)
        out = None
        for name, value in arguments.items():
            declaring = [s["properties"][name] for s in shapes if name in s["properties"]]
            if value is None:
                if (
                    declaring
                    and all(_excludes_null(sub, root, work) for sub in declaring)
                    and not any(name in _schema_list(s, "required") for s in shapes)
                ):
                    out = dict(arguments) if out is None else out
                    del out[name]
            elif isinstance(value, (dict, list)) and len(declaring) == 1:
                new = build_call_arguments(declaring[0], value, root, work=work)
                if new is not value:
                    out = dict(arguments) if out is None else out
                    out[name] = new
        return arguments if out is None else out
    if isinstance(arguments, list):
        shapes = [s for s in _argument_shapes(schema, root, "array", work) if isinstance(s.get("items"), dict)]
        if len(shapes) != 1:
            return arguments
        items = [build_call_arguments(shapes[0]["items"], v, root, work=work) for v in arguments]
        return items if any(a is not b for a, b in zip(items, arguments)) else arguments
    return arguments


def build_tool_entry(
    name: str, server: str, tool: Mapping[str, Any], shaped: tuple[dict[str, Any], dict[str, str]] | None = None
) -> dict[str, Any]:
    """A ``list_tools`` entry (docs/contract.md §11.2 TOOL) with a definition for each model family (``shaped``:
    ``build_definitions(tool)``, cached with the catalogue); a family it is left out of has none."""
    description = tool.get("description")
    description = description if isinstance(description, str) else ""
    schema = tool.get("inputSchema")
    entry: dict[str, Any] = {
        "name": name,
        "server_name": server,
        "tool_name": tool.get("name"),
        "description": description,
        "inputSchema": schema if isinstance(schema, dict) else {"type": "object", "properties": {}},
    }
    if isinstance(tool.get("annotations"), dict):
        entry["annotations"] = tool["annotations"]
    if tool_task_support(tool) == "required":  # listed, never hidden; its call_tool is refused unsent (§5)
        entry["task_support"] = "required"
    # OpenAI: the "function" of a Chat Completions tool ({"type": "function", "function": …}), strict or not;
    # Anthropic: a Messages API tool as it is; Gemini: a FunctionDeclaration. The injected name fits all three.
    definitions, reasons = shaped if shaped is not None else build_definitions(tool)
    if "function" in definitions:
        entry["function"] = {"name": name, "description": description, "parameters": definitions["function"]}
    if "function_strict" in definitions:
        strict = definitions["function_strict"]
        entry["function_strict"] = {"name": name, "description": description, "parameters": strict, "strict": True}
    if "anthropic" in definitions:
        entry["anthropic"] = {"name": name, "description": description, "input_schema": definitions["anthropic"]}
    if "gemini" in definitions:  # FunctionDeclaration.description is REQUIRED: an empty one is unset (AIP-203)
        title = tool.get("title") if isinstance(tool.get("title"), str) else ""
        entry["gemini"] = {"name": name, "description": description or title or name}
        if definitions["gemini"] is not None:
            entry["gemini"]["parameters"] = definitions["gemini"]
    return entry


def build_resource_reader(server: str) -> dict[str, Any]:
    """The resource-reading tool ``--inject-resource-tools`` adds for ``server``, as a server would list it."""
    return {
        "name": RESOURCE_READER_TOOL,
        "description": f"Read one resource of MCP server {server!r} by its URI (resources/read), such as the URI of "
        "a resource link in one of its tools' results.",
        "inputSchema": {
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "the resource's URI"}},
            "required": ["uri"],
        },
    }


def build_resource_reader_entry(name: str, server: str) -> dict[str, Any]:
    """The ``list_tools`` entry of ``server``'s resource-reading tool (docs/contract.md §11.2): a TOOL in all four
    model-family shapes whose ``tool_name`` is null and ``resource_reader`` true."""
    entry = build_tool_entry(name, server, build_resource_reader(server))
    entry.update(tool_name=None, resource_reader=True)
    return entry


# -- 10.3.3 a command and its catalogues: the parsed command, Catalogues cached per session ----------------------------


@dataclass(slots=True)
class ResidentCommand:
    """One command read from stdin, while it is served."""

    task_id: str
    action: str
    params: dict[str, Any]
    user_id: str | None
    access_token: str | None
    # its one budget, from its arrival (``parse_command``): every step of it asks this Deadline
    deadline: Deadline
    servers: list[ResolvedServer] = field(default_factory=list)  # resolved for it: their secrets scrub its answer
    chosen: dict[str, dict[str, str]] = field(default_factory=dict)  # server -> its credential, chosen once
    # from its registry view: the user's own credentials and the system ones (both scrub its answer)
    credentials: tuple[Mapping[str, Mapping[str, str]], ...] = ()


def usable_rows(view: RegistryView) -> list[RegistryServer]:
    """The enabled servers of a view, by name."""
    return [row for name, row in sorted(view.servers.items()) if row.enabled]


def command_scrubber(log: Log, command: ResidentCommand) -> Redactor:
    """What scrubs ``command``'s answer: the system secrets and the command's own user's and sessions' (§11.5)."""
    return build_command_redactor(log.redactor, command.access_token, command.servers, command.credentials)


@dataclass
class Catalogues:
    """Each session's tool catalogue — its slot's copy, the registry's cache, or discovery — and each user's
    injected-name table. ``tools`` is one server's catalogue, ``gather`` many at once, ``answer`` the listing."""

    pool: SessionPool
    registry: Registry
    events: EventSink
    log: Log
    timeout: float  # --timeout: each discovery's budget
    inject: bool = False  # --inject-resource-tools: a resource-reading tool for each server that declares resources
    # user -> injected -> (server, tool); (server, None): the server's resource-reading tool
    names: dict[str, dict[str, tuple[str, str | None]]] = field(default_factory=dict)
    named_at: dict[str, float] = field(default_factory=dict)  # user -> when ``names`` was set (monotonic)

    def use(self, command: ResidentCommand, view: Any, row: Any) -> tuple[Slot, ResolvedServer]:
        """The slot and resolved server of ``row`` for ``command``'s user (whose secrets then scrub its answer);
        ``server.failed`` when it cannot be resolved (credentials, variables, its row)."""
        try:
            slot, server = self.pool.use_server(view, row, command.user_id, command.chosen)
        except BkmcpError as exc:
            self.failed_event(command, row, "resolve", exc)
            raise
        command.servers.append(server)
        return slot, server

    def session(self, command: ResidentCommand, row: Any, slot: Slot, server: ResolvedServer) -> ResidentSession:
        """The slot's live session (opened when needed within what is left of the command's one ``Deadline``);
        ``server.failed`` when it cannot be connected."""
        deadline = command.deadline
        try:
            return self.pool.session(slot, server, deadline.left(), budget=deadline.seconds)
        except BkmcpError as exc:
            self.failed_event(command, row, "connect", exc)
            raise

    def failed_event(self, command: ResidentCommand, row: Any, stage: str, exc: BkmcpError) -> None:
        """``server.failed``: a server could not be resolved (credentials, variables, its row) or connected."""
        self.events.emit(
            "server.failed",
            server=row.name,
            user=command.user_id if row.isolation == "user" else None,
            task_id=command.task_id,
            stage=stage,
            error_code=exc.code,
        )

    def tools(
        self, command: ResidentCommand, view: Any, row: Any, *, refresh: bool = False, connect: bool = False
    ) -> list[dict[str, Any]]:
        """The cached catalogue of this user's session of ``row``: memory, the registry cache, or discovery
        (``connect``: discover unless the session is live)."""
        slot, server = self.use(command, view, row)
        timeout = command.deadline.seconds  # what a timeout's message names
        self.pool.use(slot, 1)
        try:
            live = slot.session
            refresh = refresh or (connect and (live is None or not live.alive))
            stale = live is not None and live.tools_stale
            if (
                not refresh
                and slot.tools is not None
                and catalogue_fresh(slot.fresh_until, stale, time.monotonic())
                and slot.fingerprint == slot_fingerprint(slot, server)
            ):
                return slot.tools
            if not refresh and not stale and slot.tools is None and live is None:
                cached = self._load(slot)  # kept from an earlier run, by the same rule (its ttlMs is stored)
                if cached is not None:
                    slot.tools, slot.fresh_until = cached
                    slot.fingerprint = slot_fingerprint(slot, server)
                    return slot.tools
            session = self.session(command, row, slot, server)
            started = time.monotonic()

            def failed(exc: BkmcpError) -> None:
                self.events.emit(
                    "server.discover",
                    server=row.name,
                    user=slot.user or None,
                    tool_count=len((exc.data or {}).get("tools", [])),
                    complete=False,
                    ms=int((time.monotonic() - started) * 1000),
                    error_code=exc.code,
                )

            try:
                tools, ttl_ms = self.pool.lend(
                    slot, session, lambda: session.list_tools(command.deadline.left()), failed
                )
            except BkmcpError as exc:
                raise platform_error(exc, server=row.name, timeout=timeout) from None
            self.events.emit(
                "server.discover",
                server=row.name,
                user=slot.user or None,
                tool_count=len(tools),
                complete=True,
                ms=int((time.monotonic() - started) * 1000),
            )
            slot.tools, slot.tools_version = tools, session.protocol_version
            slot.fresh_until = catalogue_kept_until(ttl_ms, started)
            self._store(slot, ttl_ms)
            return tools
        finally:
            self.pool.use(slot, -1)

    def _load(self, slot: Slot) -> tuple[list[dict[str, Any]], float | None] | None:
        """The registry's cached catalogue of ``slot`` and until when it is fresh (monotonic; None: until a change),
        or None: none, unreadable, or its ``ttlMs`` passed since it was fetched."""
        try:
            cached = self.registry.load_tools(slot.server, slot.user)
        except BkmcpError as exc:
            self.log.debug(f"tools cache of {slot.server!r} unreadable: {exc.code}")
            return None
        if cached is None:
            return None
        # its age by the wall clock (the catalogue may come from an earlier run), counted on this process's clock
        now = time.monotonic()
        fresh_until = catalogue_kept_until(cached.ttl_ms, now - (time.time() - cached.fetched_at))
        return (cached.tools, fresh_until) if catalogue_fresh(fresh_until, False, now) else None

    def _store(self, slot: Slot, ttl_ms: int) -> None:
        if slot.tools is None:
            return
        try:
            self.registry.store_tools(slot.server, slot.user, slot.tools, slot.tools_version, ttl_ms)
        except BkmcpError as exc:
            self.log.debug(f"tools cache of {slot.server!r} not written: {exc.code}")

    def gather(
        self, command: ResidentCommand, view: Any, rows: list[Any], refresh: bool
    ) -> tuple[dict[str, list[dict[str, Any]]], list[dict[str, Any]]]:
        """Every server's catalogue, discovered concurrently; a failing server goes to ``errors``."""
        import threading

        view_rows = rows
        found: dict[str, list[dict[str, Any]]] = {}
        errors: list[dict[str, Any]] = []
        lock = threading.Lock()

        def one(row: Any) -> None:
            try:
                tools = self.tools(command, view, row, refresh=refresh)
                with lock:
                    found[row.name] = tools
                if self.inject:
                    self.reads_resources(command, view, row)
            except BkmcpError as exc:
                with lock:
                    errors.append(self.error_entry(command, row, exc))
                if refresh:  # the previous catalogue stays for list_tools
                    slot = self.pool.peek(command.user_id, row)
                    if slot is not None and slot.tools is not None:
                        with lock:
                            found.setdefault(row.name, slot.tools)

        run_each(one, view_rows)
        errors.sort(key=lambda e: e["server_name"])
        return found, errors

    def error_entry(self, command: ResidentCommand, row: Any, exc: BkmcpError) -> dict[str, Any]:
        """One server's entry in an answer's ``errors`` (a listing across servers): its code and its message in the
        platform's words, scrubbed with the command's own secrets."""
        message = platform_error(exc, server=row.name, timeout=command.deadline.seconds).message
        return {
            "server_name": row.name,
            "error_code": exc.code,
            "error": command_scrubber(self.log, command).scrub(message),
        }

    def reads_resources(self, command: ResidentCommand, view: Any, row: Any) -> bool:
        """``--inject-resource-tools``: whether ``row``'s server declared resources when this user's session of it
        was last opened; a catalogue read from the registry's cache has no session yet: one is opened to learn it."""
        slot = self.pool.peek(command.user_id, row)
        if slot is None or slot.resources is None:
            slot, server = self.use(command, view, row)
            self.pool.use(slot, 1)
            try:
                self.pool.release(self.session(command, row, slot, server))
            finally:
                self.pool.use(slot, -1)
        return slot.resources is True

    def known_pairs(
        self, command: ResidentCommand, view: Any, found: Mapping[str, list[dict[str, Any]]] | None = None
    ) -> list[tuple[str, str | None]]:
        """Every (server, tool) this user sees: the catalogues in ``found`` (those an answer is built from), else
        the ones cached for them now, each read once (another user's refresh may replace a shared one meanwhile);
        with ``--inject-resource-tools``, (server, None) for each server whose session declared resources."""
        pairs: list[tuple[str, str | None]] = []
        for row in usable_rows(view):
            slot = self.pool.peek(command.user_id, row)
            tools = found.get(row.name) if found is not None else None
            if tools is None:
                tools = slot.tools if slot is not None else None
            if tools is not None:
                pairs += [(row.name, str(t.get("name"))) for t in tools if isinstance(t, dict)]
                if self.inject and slot is not None and slot.resources is True:
                    pairs.append((row.name, None))
        return pairs

    def answer(
        self,
        command: ResidentCommand,
        view: Any,
        rows: list[Any],
        found: Mapping[str, list[dict[str, Any]]],
        errors: list[dict[str, Any]],
    ) -> dict[str, Any]:
        """A ``list_tools``/``refresh_tools`` answer for ``rows`` and the user's new name table, both from the one
        snapshot ``found`` (another user's refresh may replace a shared catalogue meanwhile)."""
        table = build_injected_names(self.known_pairs(command, view, found))
        assert command.user_id is not None
        self.names[command.user_id] = table
        self.named_at[command.user_id] = time.monotonic()
        by_pair = {pair: injected for injected, pair in table.items()}
        tools: list[dict[str, Any]] = []
        warnings: list[dict[str, Any]] = []
        for row in rows:
            catalogue = found.get(row.name, [])
            shaped = self.shaped(command, row, catalogue)
            for index, tool in enumerate(catalogue):
                if isinstance(tool, dict):
                    pair = (row.name, str(tool.get("name")))
                    tools.append(build_tool_entry(by_pair[pair], row.name, tool, shaped[index]))
                    warnings += [  # a family a tool is left out of, and why (docs/contract.md §11.2)
                        {"server_name": row.name, "tool_name": tool.get("name"), "family": family, "reason": why}
                        for family, why in shaped[index][1].items()
                    ]
            if (row.name, None) in by_pair:  # --inject-resource-tools
                tools.append(build_resource_reader_entry(by_pair[(row.name, None)], row.name))
        answer: dict[str, Any] = {"tools": tools, "errors": errors}
        if warnings:
            answer["warnings"] = warnings
        return answer

    def shaped(self, command: ResidentCommand, row: Any, catalogue: list[dict[str, Any]]) -> dict[int, Any]:
        """Each tool's definitions per model family (``build_definitions``), by its index in ``catalogue``:
        built once per catalogue and kept on its slot beside it (a catalogue replaced since is shaped anew)."""
        slot = self.pool.peek(command.user_id, row)
        kept = slot.shaped if slot is not None else None
        if kept is not None and kept[0] is catalogue:
            return kept[1]
        shaped = {i: build_definitions(t) for i, t in enumerate(catalogue) if isinstance(t, dict)}
        if slot is not None and slot.tools is catalogue:
            slot.shaped = (catalogue, shaped)
        return shaped

    def forget(self, users: set[str], decided: float) -> None:
        """The reaper forgot these users' slots at ``decided``: their name tables go too (a user who comes back
        starts over), but not one a command of a user who came back has set since."""
        for user in users:
            if self.named_at.get(user, decided) < decided:
                self.names.pop(user, None)
                self.named_at.pop(user, None)


# -- 10.4 the command server (docs/contract.md §11.1, §11.2) -----------------------------------------------------------


# -- 10.4.1 parsing a command: limits, the platform's wording (platform_error), parse_command -------------------------

# JSON lines in, one answer per command out: the reader thread, a bounded worker pool, the thirteen actions
# (``Actions``), the end (shutdown, EOF, signals) that answers every command read, and ``run_resident``. An error
# reaches the platform in its words (``platform_error``: no hints, a timeout as the command's budget in ms).

RESIDENT_LINE_LIMIT = 16 * 1024 * 1024  # bytes of one command line (docs/contract.md §11.1)
RESIDENT_ACTIONS = (
    "init",
    "list_servers",
    "connect_server",
    "disconnect_server",
    "list_tools",
    "refresh_tools",
    "call_tool",
    "list_resources",
    "read_resource",
    "list_prompts",
    "get_prompt",
    "list_skills",
    "read_skill",
    "shutdown",
)
_NO_USER_ACTIONS = frozenset({"init", "list_servers", "shutdown"})
# the params each action requires (parse_command: invalid_command without them)
_REQUIRED_PARAMS = {
    "connect_server": ("server_name",),
    "disconnect_server": ("server_name",),
    "read_resource": ("server_name", "uri"),
    "get_prompt": ("server_name", "name"),
    "read_skill": ("server_name", "name"),
}
_TIMED_ACTIONS = frozenset(
    {"call_tool", "list_resources", "read_resource", "list_prompts", "get_prompt", "list_skills", "read_skill"}
)
_MAX_COMMANDS_RUNNING = 4096  # commands executing at once; the reader waits (back-pressure) beyond it
_IDLE_WORKERS = 16  # command threads kept waiting for the next command (starting a thread costs ~0.1 ms)
_WORKER_IDLE_SECONDS = 30.0  # an idle command thread ends after this long without a command
_DRAIN_SLACK = 5.0  # EOF: beyond a command's own deadline, time for its closing steps and its answer
_SHUTDOWN_GRACE = 2.0  # shutdown: time the commands cut short get to write their own answers after every close
# Terminating signals that end the process like SIGTERM (every command answered, no child left); SIGINT exits 130.
_STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2")
_MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000


def platform_error(exc: BkmcpError, *, server: str | None = None, timeout: float | None = None) -> BkmcpError:
    """An error in the platform's words, built from its fields (a copy): no hints; a timeout names the
    command's budget in ms; a connection that failed for want of descriptors is ``resource_limit``."""
    if isinstance(exc, ConnectionFailedError) and is_exhaustion(exc.__cause__ or exc.__context__):
        return ResourceLimitError(
            exc.message + " (a system limit on open files is reached)",
            details=dict(exc.details),
            request_sent=request_was_sent(exc),
        )
    changes: dict[str, Any] = {"hint": None, "notes": (), "remedy": None}
    if isinstance(exc, McpTimeoutError) and timeout is not None and exc.what is not None:
        where = f" on server {server!r}" if server else ""
        sent = request_was_sent(exc)
        changes["message"] = f"no answer{where} within {int(timeout * 1000)} ms" + (
            "; the call was sent and its outcome is unknown" if sent and exc.details.get("outcome") else ""
        )
    return exc.copy(**changes)


def _field_type(params: Mapping[str, Any], name: str, kind: type, task_id: Any, what: str) -> Any:
    value = params.get(name)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise InvalidCommandError(f"field {name!r} must be {what}", details={"task_id": task_id})
    return value


_USER_ID_MAX = 1024  # characters of user.userId (it travels in SQL parameters, URLs and events)


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_ASKING_ACTIONS = frozenset({"call_tool", "read_resource", "get_prompt"})  # a server may ask during these (§11.2)
_ELICIT_ACTIONS = ("accept", "decline", "cancel")


def _check_resume(params: Mapping[str, Any], task_id: Any) -> None:
    """``resume`` (a string) and ``input_responses`` (an object of ElicitResults by question key: ``action`` one of
    accept, decline, cancel; ``content`` an object) of an action a server may ask during; one needs the other."""
    resume, responses = params.get("resume"), params.get("input_responses")
    _field_type(params, "resume", str, task_id, "a string (the resume handle of an input_required answer)")
    if (resume is None) != (responses is None):
        raise InvalidCommandError("fields 'resume' and 'input_responses' go together", details={"task_id": task_id})
    if responses is None:
        return
    if not isinstance(responses, dict) or not all(
        isinstance(r, dict) and r.get("action") in _ELICIT_ACTIONS and isinstance(r.get("content", {}), dict)
        for r in responses.values()
    ):
        raise InvalidCommandError(
            "field 'input_responses' must be an object of answers by question key, each "
            '{"action": "accept"|"decline"|"cancel", "content": {...}}',
            details={"task_id": task_id},
        )


def parse_command(line: bytes, timeout: float = DEFAULT_TIMEOUT) -> ResidentCommand:
    """One stdin line -> a command with its one ``Deadline`` (its ``timeout_ms``, else ``timeout``: ``--timeout``)
    from now, its arrival; ``InvalidCommandError``/``UnknownActionError`` carry ``details.task_id`` (the task_id
    when one could be read, else None)."""
    try:
        document = parse_json(line)
    except JsonInputError as exc:
        raise InvalidCommandError(f"the command is not valid JSON: {exc}", details={"task_id": None}) from None
    if not isinstance(document, dict):
        raise InvalidCommandError("a command must be a JSON object", details={"task_id": None})
    raw_id = document.get("task_id")
    task_id = raw_id if isinstance(raw_id, str) and raw_id else None
    if raw_id is None:
        raise InvalidCommandError("field 'task_id' is required", details={"task_id": None})
    if task_id is None:
        raise InvalidCommandError("field 'task_id' must be a non-empty string", details={"task_id": None})
    command = document.get("command")
    if command != "invoke":
        raise InvalidCommandError(
            "field 'command' must be \"invoke\"" if command is not None else "field 'command' is required",
            details={"task_id": task_id},
        )
    params = document.get("params")
    if not isinstance(params, dict):
        raise InvalidCommandError("field 'params' must be an object", details={"task_id": task_id})
    action = params.get("action")
    if not isinstance(action, str):
        raise InvalidCommandError("field 'params.action' must be a string", details={"task_id": task_id})
    if action not in RESIDENT_ACTIONS:
        raise UnknownActionError(
            f"unknown action {clip_text(repr(action), 80)}; actions: {', '.join(RESIDENT_ACTIONS)}",
            details={"task_id": task_id},
        )
    user = document.get("user")
    user_id = access_token = None
    if user is not None:
        if not isinstance(user, dict):
            raise InvalidCommandError("field 'user' must be an object", details={"task_id": task_id})
        user_id = user.get("userId")
        if not isinstance(user_id, str) or not user_id:
            raise InvalidCommandError("field 'user.userId' must be a non-empty string", details={"task_id": task_id})
        if len(user_id) > _USER_ID_MAX or not _is_utf8(user_id):
            raise InvalidCommandError(
                f"field 'user.userId' must be text of at most {_USER_ID_MAX} characters (valid Unicode: no lone "
                "surrogate)",
                details={"task_id": task_id},
            )
        access_token = user.get("accessToken")
        if access_token is not None and not isinstance(access_token, str):
            raise InvalidCommandError("field 'user.accessToken' must be a string", details={"task_id": task_id})
    elif action not in _NO_USER_ACTIONS:
        raise InvalidCommandError(f"field 'user' is required for {action}", details={"task_id": task_id})
    for name in ("server_name", "tool_name", "name"):
        value = _field_type(params, name, str, task_id, "a string")
        if value == "":
            raise InvalidCommandError(f"field {name!r} must not be empty", details={"task_id": task_id})
    for name in _REQUIRED_PARAMS.get(action, ()):
        if params.get(name) is None:
            raise InvalidCommandError(f"field {name!r} is required for {action}", details={"task_id": task_id})
    if action == "read_resource":
        if not isinstance(params["uri"], str) or not params["uri"]:
            raise InvalidCommandError("field 'uri' must be a non-empty string", details={"task_id": task_id})
        _field_type(params, "include_blobs", bool, task_id, "a boolean")
    if action == "get_prompt" and params.get("arguments") is not None:
        arguments = params["arguments"]
        if not isinstance(arguments, dict) or not all(isinstance(v, str) for v in arguments.values()):
            raise InvalidCommandError(
                "field 'arguments' must be an object of strings (a prompt's arguments are strings)",
                details={"task_id": task_id},
            )
    if action in _TIMED_ACTIONS:
        timeout_ms = _field_type(params, "timeout_ms", int, task_id, "a positive integer (milliseconds)")
        if timeout_ms is not None and not 0 < timeout_ms <= _MAX_TIMEOUT_MS:
            raise InvalidCommandError(
                "field 'timeout_ms' must be a positive integer of at most 7 days", details={"task_id": task_id}
            )
    if action == "call_tool":
        by_name = params.get("name") is not None
        by_pair = params.get("server_name") is not None or params.get("tool_name") is not None
        if by_name == by_pair or (by_pair and (params.get("server_name") is None or params.get("tool_name") is None)):
            raise InvalidCommandError(
                "call_tool needs either 'name' (an injected name) or 'server_name' and 'tool_name'",
                details={"task_id": task_id},
            )
        if "arguments" in params and not isinstance(params["arguments"], dict):
            raise InvalidCommandError("field 'arguments' must be an object", details={"task_id": task_id})
    if action in _ASKING_ACTIONS:
        _check_resume(params, task_id)
    own = params.get("timeout_ms")  # checked above for _TIMED_ACTIONS; any action's integer counts, as it always did
    seconds = own / 1000 if isinstance(own, int) and not isinstance(own, bool) else timeout
    return ResidentCommand(task_id, action, params, user_id, access_token, Deadline(seconds))


def _cut_by_shutdown(command: ResidentCommand) -> BkmcpError:
    """The answer of a command that the end (``shutdown``, a signal, the EOF deadline) cut short before it could give
    its own: a failure, never a partial success; a call's outcome is unknown (it may have reached the server)."""
    if command.action == "call_tool":
        return ConnectionFailedError(
            "bkmcp shut down before the call finished; the call may have reached the server: its outcome is unknown",
            details={"outcome": "unknown"},
        )
    return ConnectionFailedError(f"bkmcp shut down before {command.action} finished")


# -- 10.4.2 the reader's helpers: the bounded worker pool, the answer writer, commands in flight -----------------------


class WorkerPool:
    """A bounded pool of threads for blocking jobs (python-lsp-jsonrpc's ``Endpoint`` keeps a small executor the same
    way): jobs go through one ``queue.SimpleQueue``; a job that finds no idle thread starts a new one (so jobs that
    block in I/O never wait for each other), up to ``limit`` jobs at once (``submit`` waits beyond that:
    back-pressure); a thread that finished a job waits for the next one unless ``keep`` threads wait already, and
    ends after ``idle_seconds`` without one. Starting a thread costs ~0.1 ms, which reuse saves on a steady stream.
    """

    def __init__(self, run: Callable[[Any], None], *, limit: int, keep: int, idle_seconds: float, name: str) -> None:
        import queue
        import threading

        self._run = run
        self._keep = keep
        self._idle_seconds = idle_seconds
        self._name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._room = threading.BoundedSemaphore(limit)
        self.idle = 0  # threads waiting for a job, less the jobs already promised to them
        self.threads: set[Any] = set()  # every pool thread alive, busy or idle
        self._stopped = False

    def submit(self, job: Any) -> bool:
        """Run ``job`` on a pool thread; False (it does not run) when no thread could be started (``ulimit -u``)."""
        import threading

        self._room.acquire()
        with self._lock:
            reuse = self.idle > 0
            if reuse:
                self.idle -= 1
        if reuse:
            self._jobs.put(job)
            return True
        # the first job in a box that _work empties: a Thread keeps its args while it runs, and an idle thread must
        # not pin a command it ran (its arguments, its user's access token) for hours
        thread = threading.Thread(target=self._work, args=([job],), name=self._name, daemon=True)
        with self._lock:
            self.threads.add(thread)
        try:
            thread.start()
        except RuntimeError:
            with self._lock:
                self.threads.discard(thread)
            self._room.release()
            return False
        return True

    def _work(self, first: list[Any]) -> None:
        import threading

        job = first.pop()
        try:
            while job is not None:
                try:
                    self._run(job)
                finally:
                    self._room.release()
                job = None  # not pinned while this thread waits for the next one
                job = self._next()
        finally:
            with self._lock:
                self.threads.discard(threading.current_thread())

    def _next(self) -> Any:
        """The next job, or None: stopped, ``keep`` threads wait already, or none came within ``idle_seconds``."""
        import queue

        with self._lock:
            if self._stopped or self.idle >= self._keep:
                return None
            self.idle += 1
        while True:
            try:
                return self._jobs.get(timeout=self._idle_seconds)
            except queue.Empty:
                with self._lock:
                    if self.idle > 0:  # no job is promised to the waiting threads beyond their number: this one ends
                        self.idle -= 1
                        return None
                # a submit promised a job to this thread at the last moment: it is on its way

    def stop(self, wait: float) -> None:
        """Idle threads end now, busy ones after their job; waits at most ``wait`` seconds for them."""
        with self._lock:
            self._stopped = True
            idle, self.idle = self.idle, 0
            threads = list(self.threads)
        for _ in range(idle):
            self._jobs.put(None)
        end = time.monotonic() + wait
        for thread in threads:
            thread.join(max(0.0, end - time.monotonic()))


class AnswerWriter:
    """stdout: one answer per line, flushed, whole lines only (one lock); failures scrubbed by the redactor (the
    tool's raw result in ``details.result`` is data and kept). A write that fails means the platform went away:
    ``broken``, later answers are dropped, and ``on_broken`` runs once."""

    def __init__(self, stdout: Any, redactor: Redactor, *, on_broken: Callable[[], None]) -> None:
        import threading

        self._out = stdout
        self._lock = threading.Lock()
        self.redactor = redactor
        self.broken = False
        self._on_broken = on_broken

    def write(self, answer: dict[str, Any]) -> None:
        data = (dump_json(answer) + "\n").encode("utf-8", "surrogatepass")
        with self._lock:
            if self.broken:
                return
            try:
                self._out.write(data)
                self._out.flush()
            except (OSError, ValueError):
                self.broken = True
                self._on_broken()

    def fail(self, task_id: Any, exc: BkmcpError, scrub: Redactor | None = None) -> None:
        """A failure answer, scrubbed with ``scrub`` (the command's own redactor, ``ResidentServer._scrubber``; the
        system secrets alone for a line that is not a command)."""
        scrub = scrub or self.redactor
        answer: dict[str, Any] = {
            "task_id": task_id,
            "success": False,
            "error": scrub.scrub(exc.message),
            "error_code": exc.code,
        }
        details = scrub.scrub_value({k: v for k, v in exc.details.items() if k != "task_id"})
        if isinstance(exc, CapabilityUnsupportedError) and isinstance(exc.data, dict) and "result" in exc.data:
            details["result"] = exc.data["result"]  # the tool's raw result is data, returned as received
        if details:
            answer["details"] = details
        self.write(answer)


class InFlight:
    """The commands read and not answered yet, by ``task_id``: a second command with a ``task_id`` in flight is a
    duplicate, and each command gets exactly one answer — its own (``claim`` first) or, at the end, the one
    ``take_all`` hands out for every command still here."""

    def __init__(self) -> None:
        import threading

        self._commands: dict[str, ResidentCommand] = {}
        self._changed = threading.Condition()  # notified whenever a command leaves

    def __contains__(self, task_id: str) -> bool:
        with self._changed:
            return task_id in self._commands

    def add(self, command: ResidentCommand) -> bool:
        """False (nothing added) when a command with this ``task_id`` is in flight."""
        with self._changed:
            if command.task_id in self._commands:
                return False
            self._commands[command.task_id] = command
            return True

    def claim(self, command: ResidentCommand) -> bool:
        """Whether ``command`` is still unanswered; it then leaves (its answer is the caller's to write)."""
        with self._changed:
            if self._commands.get(command.task_id) is not command:
                return False
            del self._commands[command.task_id]
            self._changed.notify_all()
            return True

    def wait(self, deadline: Callable[[ResidentCommand], float], cut: Callable[[], bool] = lambda: False) -> None:
        """Until none is left, the latest ``deadline(command)`` (monotonic) of those left has passed, or ``cut()``."""
        with self._changed:
            while self._commands and not cut():
                left = max(deadline(c) for c in self._commands.values()) - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(min(0.25, left))

    def take_all(self) -> list[ResidentCommand]:
        """Every command still unanswered, oldest first; they leave (the caller answers each)."""
        with self._changed:
            left = sorted(self._commands.values(), key=lambda c: c.deadline.start)
            self._commands.clear()
            self._changed.notify_all()
        return left


# -- 10.4.3 Actions: the resident's actions, one method each -----------------------------------------------------------


def build_resource_contents(result: dict[str, Any], *, include_blobs: bool, cap: int) -> dict[str, Any]:
    """A ``resources/read`` result for the platform: text contents as received; each blob as ``{uri, mimeType, …,
    bytes, sha256}`` (its decoded size and SHA-256, the base64 left out) unless ``include_blobs``, then as received
    when each blob decodes to at most ``cap`` bytes (``--max-blob-bytes``, the CLI's rule), else ``blob_too_large``
    (the answer as a whole is bounded by what the server sent: one message, already read)."""
    import base64
    import hashlib

    contents: list[Any] = []
    for item in result.get("contents") or []:
        if isinstance(item, dict) and isinstance(item.get("blob"), str):
            try:
                data = base64.b64decode("".join(item["blob"].split()), validate=True)
            except ValueError:
                raise ProtocolError(
                    f"resources/read: the blob of {clip_text(repr(item.get('uri')), 200)} is not base64"
                ) from None
            if include_blobs and len(data) > cap:
                raise blob_over_cap(
                    f"the blob of {clip_text(repr(item.get('uri')), 200)}",
                    len(data),
                    cap,
                    "nothing of it was answered",
                    "read it without include_blobs for each blob's size and sha256",
                )
            if not include_blobs:
                item = {k: v for k, v in item.items() if k != "blob"}
                item.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        contents.append(item)
    return {**result, "contents": contents}


@dataclass
class Actions:
    """The thirteen actions of docs/contract.md §11.2 (``do_*``, one command each, on a worker thread): each takes its
    user's registry view (``_view``), uses the session pool (10.2) and the catalogues (10.3), and returns its
    ``result`` or raises the error its answer carries."""

    opts: ResidentOptions
    registry: Registry
    pool: SessionPool
    catalogues: Catalogues
    events: EventSink
    log: Log
    stopping: Any  # threading.Event: the end is closing the sessions under running commands (ResidentServer.cutting)
    questions: ForwardedQuestions | None = None  # --elicitation forward: the rounds kept for the platform's resume

    def run(self, command: ResidentCommand) -> dict[str, Any]:
        return getattr(self, f"do_{command.action}")(command)  # type: ignore[no-any-return]

    def _view(self, command: ResidentCommand) -> Any:
        """This command's registry view, waited for within the command's own timeout."""
        view = self.registry.view(command.user_id, command.access_token, timeout=command.deadline.left())
        command.credentials = (view.user_credentials, view.system_credentials)
        self.pool.retire_gone(view)
        return view

    def _row(self, view: Any, name: str) -> Any:
        row = view.servers.get(name)
        if row is None:
            names = sorted(n for n, r in view.servers.items() if r.enabled)
            raise ServerNotFoundError(
                f"no server {name!r} for this user; available: {', '.join(names) or '(none)'}",
                details={"server_name": name},
            )
        if not row.enabled:
            raise ServerDisabledError(f"server {name!r} is disabled", details={"server_name": name})
        return row

    def timeout(self, command: ResidentCommand) -> float:
        """The command's configured budget (its ``timeout_ms``, else ``--timeout``): what its messages name."""
        return command.deadline.seconds

    def budget(self, command: ResidentCommand) -> float:
        """How long ``command`` may run: its steps use ``--timeout`` from its arrival, a call its own ``timeout_ms``."""
        return max(self.timeout(command), self.opts.timeout)

    def _rejected(self, command: ResidentCommand, server: str | None, tool: str, exc: BkmcpError) -> None:
        """``tool.rejected`` for a call refused before any server was reached (the names are the platform's
        text: scrubbed with the command's own secrets)."""
        scrub = command_scrubber(self.log, command).scrub
        self.events.emit(
            "tool.rejected",
            server=None if server is None else scrub(server),
            tool=scrub(tool),
            user=command.user_id,
            task_id=command.task_id,
            error_code=exc.code,
        )

    def _tool_list(self, command: ResidentCommand, refresh: bool) -> dict[str, Any]:
        view = self._view(command)
        rows = usable_rows(view)
        name = command.params.get("server_name")
        if name is not None:
            rows = [self._row(view, name)]
        found, errors = self.catalogues.gather(command, view, rows, refresh)
        if errors and self.stopping.is_set():  # cut by the shutdown: a failure, never a partial catalogue
            raise _cut_by_shutdown(command)
        if refresh:
            errors = [e for e in errors if e["server_name"] in {r.name for r in rows}]
        return self.catalogues.answer(command, view, rows, found, errors)

    def _resumed(self, command: ResidentCommand, server_name: str, target: str) -> ForwardedRound | None:
        """The round a ``resume`` names (``ForwardedQuestions.take``), or None for a first request."""
        if command.params.get("resume") is None:
            return None
        if self.questions is None or self.opts.elicitation != "forward":
            raise InputResumeInvalidError(
                "there is nothing to resume: this resident does not forward questions (--elicitation off)",
                details={"outcome": "not_sent"},
            )
        return self.questions.take(command, server_name, target)

    def _input(
        self, command: ResidentCommand, slot: Slot, session: ResidentSession, found: ForwardedRound | None
    ) -> tuple[InputSource | None, InputRound | None]:
        """Who answers this request's questions and the round a resume answers: (None, None) when forwarding is off.
        A resume is answered only on the very session instance that asked (a restarted server knows no state)."""
        if self.questions is None or self.opts.elicitation != "forward":
            return None, None
        self._same_instance(slot, session, found)
        questions = self.questions
        source = ResidentInput(
            lambda method, params, pending, given: questions.keep(
                command, slot, session, method, params, pending, given
            ),
            found.round if found is not None else None,
            {**(found.given if found is not None else {}), **(command.params.get("input_responses") or {})},
        )
        return source, found.round if found is not None else None

    @staticmethod
    def _same_instance(slot: Slot, session: ResidentSession, found: ForwardedRound | None) -> None:
        if found is not None and found.session is not session:
            raise InputResumeInvalidError(
                f"server {slot.server!r} was restarted since it asked; the question cannot be answered, ask again",
                details={"outcome": "not_sent"},
            )

    def _asking(
        self,
        command: ResidentCommand,
        slot: Slot,
        session: ResidentSession,
        found: ForwardedRound | None,
        params: dict[str, Any],
        work: Callable[[float, InputSource | None, InputRound | None], Any],
    ) -> Any:
        """``work(time left, source, pending)``; with ``--elicitation forward`` on its own thread (``HeldCall``), so
        that a kept round or a legacy question held open becomes the ``input_required`` answer while the request
        stays in flight; a resume of a held question sends its answer and waits on the same request (nothing is
        sent again). ``params``: the request's (what a resume must name)."""
        left = command.deadline.left()
        if self.questions is None or self.opts.elicitation != "forward":
            return work(left, None, None)
        if found is not None and found.held is not None and found.reply is not None:
            self._same_instance(slot, session, found)
            key = next(iter(found.round.requests))
            given = (command.params.get("input_responses") or {}).get(key)
            found.reply(dict(given) if isinstance(given, dict) else {"action": "cancel"})  # no answer: never decline
            held = found.held
        else:
            source, pending = self._input(command, slot, session, found)
            assert isinstance(source, ResidentInput)
            held = source.held
            if session.era == "legacy":  # a question may be held open: its wait is not the request's own time
                left += self.opts.input_timeout
            held.start(lambda: work(left, source, pending))
        asked = held.wait(command.deadline)
        if asked is None:
            return answer_or_ask(held.outcome)
        request, reply = asked
        method = {"call_tool": "tools/call", "get_prompt": "prompts/get"}.get(command.action, "resources/read")
        round_ = InputRound({"elicitation-1": request}, None)
        try:
            kept = self.questions.keep(command, slot, session, method, params, round_, {}, held, reply)
        except BkmcpError:
            reply({"action": "cancel"})
            raise
        return AskedAnswer(
            status="input_required", input_requests={"elicitation-1": describe_question(request)}, **kept
        )

    # -- the actions ------------------------------------------------------------------------------

    def do_init(self, command: ResidentCommand) -> dict[str, Any]:
        view = self.registry.view(None, None)
        self.pool.retire_gone(view)
        rows = [row for _, row in sorted(view.servers.items()) if row.enabled and row.isolation == "public"]
        public = ResidentCommand(command.task_id, "init", {}, None, None, command.deadline)
        servers: dict[str, dict[str, Any]] = {}

        def one(row: Any) -> None:
            entry: dict[str, Any] = {"server_name": row.name}
            try:
                tools = self.catalogues.tools(public, view, row, connect=True)
                entry.update(status="connected", tool_count=len(tools))
            except BkmcpError as exc:
                entry.update(
                    status="failed",
                    error_code=exc.code,
                    error=command_scrubber(self.log, public).scrub(
                        platform_error(exc, server=row.name, timeout=command.deadline.seconds).message
                    ),
                )
            servers[row.name] = entry

        run_each(one, rows)
        if self.stopping.is_set() and any(s.get("status") == "failed" for s in servers.values()):
            raise _cut_by_shutdown(command)
        return {"servers": [servers[row.name] for row in rows]}

    def do_list_servers(self, command: ResidentCommand) -> dict[str, Any]:
        view = self._view(command)
        servers = []
        for row in usable_rows(view):
            if row.isolation == "user" and command.user_id is None:
                continue
            entry: dict[str, Any] = {
                "server_name": row.name,
                "transport_type": row.transport_type,
                "isolation": row.isolation,
            }
            servers.append(entry)
            try:
                if row.problem is not None:
                    entry.update(status="failed", error_code=row.problem.code)
                    continue
                check_registry_row(row)
                credential = self.pool.choose_credential(view, row, command.user_id, command.chosen)
                command.servers.append(self.pool.resolve(view, row, command.user_id, credential))
            except CredentialsMissingError:
                entry["status"] = "no_credentials"
                continue
            except BkmcpError as exc:
                entry.update(status="failed", error_code=exc.code)
                continue
            slot = self.pool.peek(command.user_id, row)
            session = slot.session if slot is not None else None
            if session is not None and session.alive:
                entry.update(status="connected", protocol_version=session.protocol_version)
            elif slot is not None and slot.last_error is not None:
                entry.update(status="failed", error_code=slot.last_error.code)
            else:
                entry["status"] = "disconnected"
            if slot is not None and slot.tools is not None:
                entry["tool_count"] = len(slot.tools)
        return {"servers": servers}

    def do_connect_server(self, command: ResidentCommand) -> dict[str, Any]:
        view = self._view(command)
        row = self._row(view, command.params["server_name"])
        session = self._on_server(command, view, row, None, lambda session, _left: session)
        tools = self.catalogues.tools(command, view, row, connect=True)
        return {
            "server_name": row.name,
            "status": "connected",
            "protocol_version": session.protocol_version,
            "era": session.era,
            "tool_count": len(tools),
        }

    def do_disconnect_server(self, command: ResidentCommand) -> dict[str, Any]:
        view = self._view(command)
        row = self._row(view, command.params["server_name"])
        slot = self.pool.peek(command.user_id, row)
        if row.isolation == "public":  # shared by every user: one user never closes it under the others (§11.5)
            session = slot.session if slot is not None else None
            status = "connected" if session is not None and session.alive else "disconnected"
            return {"server_name": row.name, "status": status, "shared": True, "closed": False}
        if slot is not None:
            self.pool.disconnect(slot, self.opts.timeout)
            slot.last_error = None
        return {"server_name": row.name, "status": "disconnected"}

    def do_list_tools(self, command: ResidentCommand) -> dict[str, Any]:
        return self._tool_list(command, refresh=False)

    def do_refresh_tools(self, command: ResidentCommand) -> dict[str, Any]:
        return self._tool_list(command, refresh=True)

    def do_call_tool(self, command: ResidentCommand) -> dict[str, Any]:
        params = command.params
        view = self._view(command)
        assert command.user_id is not None
        if params.get("name") is not None:
            injected = params["name"]
            pair = self.catalogues.names.get(command.user_id, {}).get(injected)
            if pair is None:
                pair = build_injected_names(self.catalogues.known_pairs(command, view)).get(injected)
            if pair is None and command.user_id not in self.catalogues.names:  # forgotten after idling: list again
                listed = self._tool_list(command, refresh=False)["tools"]
                pair = next(((t["server_name"], t["tool_name"]) for t in listed if t["name"] == injected), None)
            if pair is None:
                exc: BkmcpError = ToolNotFoundError(
                    f"no tool is injected as {clip_text(repr(injected), 80)} for this user", details={"name": injected}
                )
                self._rejected(command, None, injected, exc)
                raise exc
            server_name, reader_of = pair
            if reader_of is None:  # --inject-resource-tools: the server's resource-reading tool
                return self._read_by_tool(command, view, server_name, params.get("arguments") or {})
            tool_name = reader_of
        else:
            server_name, tool_name = params["server_name"], params["tool_name"]
        arguments = {} if params.get("arguments") is None else params["arguments"]
        timeout = self.timeout(command)
        try:
            row = self._row(view, server_name)
        except BkmcpError as exc:  # unknown or disabled
            self._rejected(command, server_name, tool_name, exc)
            raise
        tools = self.catalogues.tools(command, view, row)
        tool = next((t for t in tools if isinstance(t, dict) and t.get("name") == tool_name), None)
        if tool is None:
            tools = self.catalogues.tools(command, view, row, refresh=True)  # the server may have added it since
            tool = next((t for t in tools if isinstance(t, dict) and t.get("name") == tool_name), None)
        # the tool name is the platform's text: scrubbed with this command's own secrets (the events' redactor
        # knows the system ones only)
        shown = tool_name if tool is not None else command_scrubber(self.log, command).scrub(tool_name)
        base = {"server": server_name, "tool": shown, "user": command.user_id, "task_id": command.task_id}
        if tool is None:
            self.events.emit("tool.rejected", **base, error_code="mcp_tool_not_found")
            raise ToolNotFoundError(
                f"server {server_name!r} has no tool {clip_text(repr(tool_name), 80)}",
                details={"server_name": server_name, "tool_name": tool_name},
            )
        found = self._resumed(command, server_name, tool_name)
        if found is not None:  # the retry carries the request that asked, exactly (docs/contract.md §11.2)
            arguments = found.params.get("arguments") or {}
        deadline = command.deadline
        try:  # bounded by the command's own deadline, like every later step (docs/contract.md §11)
            # a strict-mode null for a field the server's schema makes optional and not nullable: left out, only for
            # a tool listed with a strict definition (the one that made such fields nullable); elsewhere a null stays
            # and the validation below refuses it, so the model learns its mistake (§11.2)
            index = next(i for i, t in enumerate(tools) if t is tool)
            if "function_strict" in self.catalogues.shaped(command, row, tools)[index][0]:
                arguments = build_call_arguments(tool.get("inputSchema"), arguments, deadline=deadline)
            validate_arguments(tool, arguments, deadline=deadline)
        except InvalidArgumentsError as exc:
            self.events.emit("tool.rejected", **base, error_code=exc.code)
            raise platform_error(exc) from None
        except McpTimeoutError as exc:
            self.events.emit("tool.failed", **base, error_code=exc.code, outcome="not_sent")
            raise platform_error(exc, server=server_name, timeout=timeout) from None
        refusal = build_task_refusal(tool, server_name)
        if refusal is not None:  # a task-only tool: no session is needed to refuse it (docs/contract.md §5)
            self.events.emit("tool.rejected", **base, error_code=refusal.code)
            raise platform_error(refusal)
        slot, server = self.pool.use_server(view, row, command.user_id, command.chosen)
        self.pool.use(slot, 1)
        started = time.monotonic()
        try:
            try:
                session = self.pool.session(slot, server, deadline.left(), budget=timeout)
            except BkmcpError as exc:
                self.events.emit("tool.failed", **base, error_code=exc.code, outcome="not_sent")
                raise platform_error(exc, server=server_name, timeout=timeout) from None
            self.events.emit("tool.started", **base)
            started = time.monotonic()

            def failed(exc: BkmcpError) -> None:
                if isinstance(exc, RemoteError) and not isinstance(exc, CapabilityUnsupportedError):
                    outcome = exc.details.get("outcome") or ("unknown" if request_was_sent(exc) else "not_sent")
                    self.events.emit(
                        "tool.failed",
                        **base,
                        error_code=exc.code,
                        outcome=outcome,
                        ms=int((time.monotonic() - started) * 1000),
                    )
                else:
                    self.events.emit(
                        "tool.finished",
                        **base,
                        ms=int((time.monotonic() - started) * 1000),
                        is_error=False,
                        error_code=exc.code,
                    )

            try:
                result = self.pool.lend(
                    slot,
                    session,
                    lambda: self._asking(
                        command,
                        slot,
                        session,
                        found,
                        {"name": tool_name, "arguments": arguments},
                        lambda left, *asking: session.call_tool(tool_name, arguments, left, tool, *asking),
                    ),
                    failed,
                )
            except BkmcpError as exc:
                raise platform_error(exc, server=server_name, timeout=timeout) from None
        finally:
            self.pool.use(slot, -1)
        if isinstance(result, AskedAnswer):  # the server asks: input.requested said so (no values)
            return {"server_name": server_name, "tool_name": tool_name, **result}
        self.events.emit(
            "tool.finished", **base, ms=int((time.monotonic() - started) * 1000), is_error=result.get("isError") is True
        )
        return {"server_name": server_name, "tool_name": tool_name, "result": result}

    # -- resources and prompts: the CLI's section-7 paths on this user's sessions ----------------------------------

    def _on_server(
        self,
        command: ResidentCommand,
        view: Any,
        row: Any,
        event: tuple[str, dict[str, Any]] | None,
        work: Callable[..., Any],
        counts: Callable[[Any], dict[str, Any]] = lambda _result: {},
        asks: tuple[ForwardedRound | None, dict[str, Any]] | None = None,
    ) -> Any:
        """``work(session, time left)`` on this user's session of ``row`` (opened on demand within the command's one
        ``Deadline``), then one event (unless None), ``event`` = (name, fields without values), with
        ``counts(result)`` or the failure's ``error_code``; a failure in the platform's words. ``asks``: the request
        may ask (``(round a resume answers or None, the request's params)``): ``work(session, left, source,
        pending)`` through ``_asking``, a question is the ``input_required`` answer (no event: ``input.requested``)."""
        name, fields = event or ("", {})
        base = {"server": row.name, "user": command.user_id, "task_id": command.task_id, **fields}
        timeout = command.deadline.seconds
        slot, server = self.catalogues.use(command, view, row)
        self.pool.use(slot, 1)
        try:
            try:
                session = self.catalogues.session(command, row, slot, server)
            except BkmcpError as exc:
                raise platform_error(exc, server=row.name, timeout=timeout) from None
            started = time.monotonic()

            def failed(exc: BkmcpError) -> None:
                if name:
                    self.events.emit(name, **base, ms=int((time.monotonic() - started) * 1000), error_code=exc.code)

            try:
                if asks is None:
                    result = self.pool.lend(slot, session, lambda: work(session, command.deadline.left()), failed)
                else:
                    result = self.pool.lend(
                        slot,
                        session,
                        lambda: self._asking(
                            command, slot, session, asks[0], asks[1], lambda *asking: work(session, *asking)
                        ),
                        failed,
                    )
            except BkmcpError as exc:
                raise platform_error(exc, server=row.name, timeout=timeout) from None
        finally:
            self.pool.use(slot, -1)
        if name and not isinstance(result, AskedAnswer):
            self.events.emit(name, **base, ms=int((time.monotonic() - started) * 1000), **counts(result))
        return result

    def _each_server(
        self, command: ResidentCommand, one: Callable[[Any, Any], dict[str, Any]]
    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """``one(view, row)`` for every server the user may use (or the one ``server_name``), concurrently: (the
        answers in server order, ``errors`` like ``list_tools``': a failing server never hides the others)."""
        view = self._view(command)
        name = command.params.get("server_name")
        rows = usable_rows(view) if name is None else [self._row(view, name)]
        found: dict[str, dict[str, Any]] = {}
        errors: list[dict[str, Any]] = []
        lock = _thread.allocate_lock()

        def each(row: Any) -> None:
            try:
                answer = one(view, row)
                with lock:
                    found[row.name] = answer
            except BkmcpError as exc:
                entry = self.catalogues.error_entry(command, row, exc)
                with lock:
                    errors.append(entry)

        run_each(each, rows)
        if errors and self.stopping.is_set():  # cut by the shutdown: a failure, never a partial answer
            raise _cut_by_shutdown(command)
        return [found[row.name] for row in rows if row.name in found], sorted(errors, key=lambda e: e["server_name"])

    def _read(
        self,
        command: ResidentCommand,
        view: Any,
        row: Any,
        uri: str,
        include_blobs: bool,
        asks: tuple[ForwardedRound | None, dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """``resources/read`` of ``uri``, its blobs shaped by ``build_resource_contents``; ``resource.read`` names
        the URI without its query string. ``asks``: as ``_on_server``'s (``read_resource`` may ask)."""
        cap = self.opts.max_blob_bytes
        return self._on_server(  # type: ignore[no-any-return]
            command,
            view,
            row,
            ("resource.read", {"uri": build_event_uri(uri)}),
            lambda session, left, *asking: build_resource_contents(
                session.read_resource(uri, left, *asking), include_blobs=include_blobs, cap=cap
            ),
            lambda r: {"content_count": len(r["contents"])},
            asks,
        )

    def _read_by_tool(
        self, command: ResidentCommand, view: Any, server_name: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        """``call_tool`` on a resource-reading tool (``--inject-resource-tools``): its ``uri`` read, the contents as
        a tool result's embedded resources (blobs as ``{mimeType, bytes, sha256}``)."""
        try:
            row = self._row(view, server_name)
            validate_arguments(build_resource_reader(server_name), arguments, deadline=command.deadline)
        except BkmcpError as exc:
            self._rejected(command, server_name, RESOURCE_READER_TOOL, exc)
            raise platform_error(exc) from None
        uri = arguments["uri"]
        contents = self._read(command, view, row, uri, include_blobs=False).get("contents") or []
        content = [{"type": "resource", "resource": item} for item in contents]
        return {
            "server_name": server_name,
            "tool_name": None,
            "resource_reader": True,
            "uri": uri,
            "result": {"content": content, "isError": False},
        }

    def do_list_resources(self, command: ResidentCommand) -> dict[str, Any]:
        def one(view: Any, row: Any) -> dict[str, Any]:
            resources, templates = self._on_server(
                command,
                view,
                row,
                ("resources.listed", {}),
                lambda session, left: session.list_resources(left),
                lambda r: {"resource_count": len(r[0]), "template_count": len(r[1])},
            )
            return {
                "server_name": row.name,
                "resource_count": len(resources),
                "template_count": len(templates),
                "resources": resources,
                "templates": templates,
            }

        servers, errors = self._each_server(command, one)
        return {"servers": servers, "errors": errors}

    def do_read_resource(self, command: ResidentCommand) -> dict[str, Any]:
        params = command.params
        view = self._view(command)
        row = self._row(view, params["server_name"])
        found = self._resumed(command, row.name, params["uri"])
        uri = params["uri"]
        result = self._read(command, view, row, uri, params.get("include_blobs") is True, (found, {"uri": uri}))
        if isinstance(result, AskedAnswer):
            return {"server_name": row.name, "uri": params["uri"], **result}
        return {"server_name": row.name, "uri": params["uri"], "result": result}

    def do_list_prompts(self, command: ResidentCommand) -> dict[str, Any]:
        return self._list_each(command, "prompts", lambda session, left: session.list_prompts(left))

    def _list_each(self, command: ResidentCommand, kind: str, listing: Callable[..., Any]) -> dict[str, Any]:
        """``list_prompts``/``list_skills``: each server's ``kind`` with their count (``prompt_count``…), and the
        servers that failed; one ``{kind}.listed`` event per server."""
        count = f"{kind[:-1]}_count"

        def one(view: Any, row: Any) -> dict[str, Any]:
            found = self._on_server(command, view, row, (f"{kind}.listed", {}), listing, lambda r: {count: len(r)})
            return {"server_name": row.name, count: len(found), kind: found}

        servers, errors = self._each_server(command, one)
        return {"servers": servers, "errors": errors}

    def do_get_prompt(self, command: ResidentCommand) -> dict[str, Any]:
        params = command.params
        name, arguments = params["name"], params.get("arguments") or {}
        view = self._view(command)
        row = self._row(view, params["server_name"])
        found = self._resumed(command, row.name, name)
        if found is not None:  # the retry carries the request that asked, exactly (docs/contract.md §11.2)
            arguments = found.params.get("arguments") or {}
        result = self._on_server(
            command,
            view,
            row,
            ("prompt.fetched", {"prompt": command_scrubber(self.log, command).scrub(name)}),
            lambda session, left, *asking: session.get_prompt(name, arguments, left, *asking),
            lambda r: {"message_count": len(r.get("messages") or [])},
            (found, {"name": name, "arguments": arguments}),
        )
        if isinstance(result, AskedAnswer):
            return {"server_name": row.name, "name": name, **result}
        return {"server_name": row.name, "name": name, "result": result}

    def do_list_skills(self, command: ResidentCommand) -> dict[str, Any]:
        return self._list_each(command, "skills", lambda session, left: session.list_skills(left))

    def do_read_skill(self, command: ResidentCommand) -> dict[str, Any]:
        """The skill verified as ``--skill`` verifies it (``load_skill``); each file's text, a file that is not
        UTF-8 as ``{mimeType, bytes, sha256}`` (as ``read_resource`` answers a blob). Unverified: the error alone."""
        name = command.params["name"]
        view = self._view(command)
        row = self._row(view, command.params["server_name"])
        skill = self._on_server(
            command,
            view,
            row,
            ("skill.read", {"skill": command_scrubber(self.log, command).scrub(name)}),
            lambda session, left: session.read_skill(name, left),
            lambda r: {"file_count": len(r["files"])},
        )
        files = [{k: v for k, v in f.items() if k != "blob"} for f in skill["files"]]
        return {"server_name": row.name, "name": name, **skill, "files": files}


# -- 10.4.4 ResidentServer: the reader and the end that answers all; memory; run_resident ------------------------------


class _Chunks:
    """A stream whose only method is ``read1`` (``read_lines`` reads it in chunks)."""

    def __init__(self, read1: Callable[[int], bytes]) -> None:
        self.read1 = read1


class ResidentServer:
    """The resident process: each line read (``read_lines``, on the reader thread) becomes a command run by the
    worker pool (``WorkerPool``: commands run concurrently, up to ``_MAX_COMMANDS_RUNNING``) and answered exactly once
    (``AnswerWriter``) with what ``Actions`` returns or raises. The end — ``shutdown``, EOF, a signal — is ``drain`` /
    ``finish`` / ``answer_the_rest``."""

    def __init__(
        self,
        opts: ResidentOptions,
        *,
        registry: Registry,
        stdout: Any,
        log: Log,
        events: EventSink,
        env: Mapping[str, str],
    ) -> None:
        import threading

        self.registry, self.log, self.env = registry, log, env
        self.pool = SessionPool(opts, registry=registry, log=log, events=events, env=env)
        self.out = AnswerWriter(stdout, log.redactor, on_broken=self._output_broke)
        self.in_flight = InFlight()
        self.workers = WorkerPool(
            self._run,
            limit=_MAX_COMMANDS_RUNNING,
            keep=_IDLE_WORKERS,
            idle_seconds=_WORKER_IDLE_SECONDS,
            name="bkmcp-command",
        )
        self.stopping = threading.Event()  # shutdown, a signal, broken output: no new command runs
        # the end closes the sessions under the commands still running (``finish``): a failure from then on is the
        # cut's, never a partial answer; during shutdown's grace a server's own failure is still reported as itself
        self.cutting = threading.Event()
        self.catalogues = Catalogues(
            self.pool,
            registry=registry,
            events=events,
            log=log,
            timeout=opts.timeout,
            inject=opts.inject_resource_tools,
        )
        self.pool.on_users_gone = self.catalogues.forget
        self.actions = Actions(
            opts,
            registry=registry,
            pool=self.pool,
            catalogues=self.catalogues,
            events=events,
            log=log,
            stopping=self.cutting,
            questions=ForwardedQuestions(opts.input_timeout, MAX_FORWARDED_QUESTIONS, events),
        )
        self.pool.on_reap = self.actions.questions.sweep if self.actions.questions is not None else None
        self.ended = threading.Event()  # the reader stopped (EOF, shutdown, unreadable stdin) or output broke
        self.signalled: int | None = None  # the terminating signal received (set by the handler, read by run_resident)
        self.shutdown_task: str | None = None
        # the reader keeps reading through the end (each line answered ``invalid_command``) until ``close_input``;
        # it holds ``_reading`` while it handles what it read, never while it waits for more
        self._input_closed = threading.Event()
        self._reading = threading.Lock()

    def _output_broke(self) -> None:
        """The platform went away (stdout closed): stop serving."""
        self.stopping.set()
        self._input_closed.set()
        self.ended.set()

    # -- input -------------------------------------------------------------------------------------

    def read_all(self, stdin: Any) -> None:
        """The reader thread: ``serve``, then ``ended`` (EOF, ``shutdown``, an unreadable stdin)."""
        try:
            self.serve(stdin)
        except (OSError, ValueError) as exc:  # stdin unreadable: as EOF
            self.log.debug(f"stdin failed: {type(exc).__name__}")
        finally:
            self.ended.set()

    def serve(self, stdin: Any) -> None:
        """Read lines until EOF or ``close_input`` (``read_lines``); the lines read after a ``shutdown`` — in the
        same read or while the end runs — are answered ``invalid_command`` (``dispatch``)."""

        def too_long(_head: bytes) -> None:
            limit = RESIDENT_LINE_LIMIT
            self.out.fail(None, InvalidCommandError(f"the command line is longer than {limit} bytes and was skipped"))

        try:
            fd: int | None = stdin.fileno()
        except (AttributeError, OSError, ValueError):  # not a file (in-process tests)
            fd = None
        read = (lambda size: os.read(fd, size)) if fd is not None else (getattr(stdin, "read1", None) or stdin.read)

        def read1(size: int) -> bytes:
            self._reading.release()  # waiting for input: ``close_input`` may take the lock now
            try:
                return read(size)  # type: ignore[no-any-return]
            finally:
                self._reading.acquire()

        with self._reading:
            read_lines(_Chunks(read1), self.dispatch, too_long, limit=RESIDENT_LINE_LIMIT, stop=self._input_closed)

    def close_input(self, stdin: Any, reader: Any, wait: float) -> None:
        """Before the answer to ``shutdown``: the reader takes what already arrived on stdin (at most ``wait``
        seconds) and answers it, then reads no more; so every line that arrived before that answer gets one."""
        import select

        self._input_closed.set()
        end = time.monotonic() + wait
        try:
            fd: int | None = stdin.fileno()
        except (AttributeError, OSError, ValueError):
            fd = None
        while fd is not None and reader.is_alive() and time.monotonic() < end:
            try:
                waiting = bool(select.select([fd], [], [], 0)[0])
            except (OSError, ValueError):
                break
            if not waiting:
                break
            reader.join(0.01)
        if reader.is_alive() and self._reading.acquire(timeout=max(end - time.monotonic(), 0.01)):
            pass  # kept: the reader handles nothing more (it is a daemon thread, the process is ending)

    def dispatch(self, line: bytes) -> None:
        try:
            command = parse_command(line, self.actions.opts.timeout)
        except (InvalidCommandError, UnknownActionError) as exc:
            self.out.fail(exc.details.get("task_id"), exc)
            return
        if self.stopping.is_set():  # read after shutdown (or a signal): answered, never run
            self.out.fail(
                command.task_id,
                InvalidCommandError("bkmcp is shutting down: this command was not run", details={"task_id": None}),
            )
            return
        if not self.in_flight.add(command):
            self.out.fail(
                command.task_id,
                DuplicateTaskIdError(
                    f"task_id {clip_text(repr(command.task_id), 80)} is already in flight; this command was not run"
                ),
            )
            return
        if command.action == "shutdown":
            self.in_flight.claim(command)  # answered last, by run_resident
            self.shutdown_task = command.task_id
            self.stopping.set()
            self.ended.set()
            return
        if not self.workers.submit(command) and self.in_flight.claim(command):  # no thread: answered, never lost
            self.out.fail(
                command.task_id,
                ResourceLimitError(
                    "no thread could be started for this command (the system's thread or memory limit is reached); "
                    "it was not run: retry it when fewer commands run",
                    hint="retry when fewer commands run",
                ),
            )

    def _run(self, command: ResidentCommand) -> None:
        """A pool thread: run one command and write its answer (unless the shutdown answered it already)."""
        try:
            result = self.actions.run(command)
            answer = {"task_id": command.task_id, "success": True, "result": result}
        except BkmcpError as exc:
            answer = None
            error = exc
        except Exception as exc:  # a bug in one command never stops the process, never a traceback
            if self.env.get("BKMCP_TRACEBACK") == "1":
                import traceback

                traceback.print_exc(file=sys.stderr)
            answer = None
            if self.cutting.is_set():  # e.g. a closed HTTP client under a call cut by the shutdown
                error = _cut_by_shutdown(command)
            elif is_exhaustion(exc):  # out of descriptors, threads or memory: a limit, never internal_error
                error = ResourceLimitError(
                    f"a system limit was reached ({type(exc).__name__}: {first_line(exc)}); the command was not "
                    "completed: retry it when fewer sessions or commands are live"
                )
            else:
                error = InternalError(f"internal error: {type(exc).__name__}: {first_line(exc)}")
        if not self.in_flight.claim(command):
            return  # the shutdown answered it already
        if answer is not None:
            self.out.write(answer)
        else:
            self.out.fail(command.task_id, error, command_scrubber(self.log, command))

    def drain(self, seconds: float | None = None) -> None:
        """EOF: let the commands already read finish, each within its own deadline (``Actions.budget`` from its arrival,
        plus ``_DRAIN_SLACK`` for closing), however long that is (at most ``seconds`` when given); a terminating
        signal cuts the wait short."""
        cap = None if seconds is None else time.monotonic() + seconds
        self.in_flight.wait(
            lambda c: min(
                c.deadline.start + self.actions.budget(c) + _DRAIN_SLACK, cap if cap is not None else float("inf")
            ),
            lambda: self.signalled is not None,
        )

    def finish(self, grace: float) -> None:
        """The end (``stopping`` is set): close every session, live or still opening (calls in flight fail and are
        answered, children's process groups are reaped), stop waiting on the registry, give the commands cut short
        ``grace`` seconds to write their own answers, answer the rest (``answer_the_rest``), end the threads."""
        self.stopping.set()
        self.cutting.set()
        self.pool.close_all()
        self.registry.abort()
        end = time.monotonic() + grace
        self.in_flight.wait(lambda c: end)
        self.answer_the_rest()
        self.workers.stop(wait=min(grace, 1.0))

    def answer_the_rest(self) -> None:
        """Every command read and not answered yet gets a clear error now (it cannot finish before the end)."""
        for command in self.in_flight.take_all():
            self.out.fail(command.task_id, _cut_by_shutdown(command))


# Modules the command threads import on first use. The interpreter's import lock is per module and breaks a
# suspected deadlock by handing out a partially initialised module, so two threads importing overlapping module
# trees for the first time can see one (issue 16 item 6a); the resident mode imports them once, on the main thread,
# before any command thread starts. The one-shot CLI has one thread and keeps its lazy imports.
_RESIDENT_MODULES = (
    "base64",
    "codecs",
    "collections",
    "ctypes",
    "fractions",
    "hashlib",
    "http.cookiejar",
    "queue",
    "select",
    "selectors",
    "shlex",
    "shutil",
    "signal",
    "socket",
    "sqlite3",
    "ssl",
    "subprocess",
    "traceback",
    "unicodedata",
    "urllib.parse",
)


def _warm_resident_imports(log: Log) -> None:
    """First use of every lazily initialised global, on one thread: modules, httpx (``import_httpx``), jsonschema and
    the validator classes built from it, ``JsonNumber``. Each is also safe to meet first on many threads (locks); this
    removes the interpreter's own import races too. A module that cannot load is left to the command that needs it
    (it then fails with its own clear error)."""
    import importlib

    for name in _RESIDENT_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:  # pragma: no cover - e.g. a Python built without ctypes or ssl
            log.debug(f"resident warm-up: {name} not available")
    try:
        import_httpx()
        number = parse_json("0.5")
        tool = {"name": "warm", "inputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}}
        validate_arguments(tool, {"n": number})
    except BkmcpError as exc:  # pragma: no cover - a broken install: the commands that need it report it
        log.debug(f"resident warm-up: {exc.message}")


_MALLOC_ARENAS = 2  # glibc malloc arenas of a long-running bkmcp process (limit_malloc_arenas)


def limit_malloc_arenas(count: int = _MALLOC_ARENAS) -> bool:
    """Cap glibc's malloc arenas in a process that serves many threads for hours (resident, warm sessions).

    glibc gives a thread that finds the main arena busy an arena of its own (up to 8 per core), and what is freed
    in one stays with it: after each load peak RSS grew with the command threads while the data held stayed flat
    (docs/resident.md, soak: +15.8 % with glibc's default, +6.2 % with 2). Python allocates under the GIL, so more
    arenas buy almost no concurrency. A ``MALLOC_ARENA_MAX`` the operator set wins; elsewhere than glibc nothing
    changes. True when the cap was set."""
    mallopt = None if "MALLOC_ARENA_MAX" in os.environ else _libc("mallopt")
    return mallopt is not None and bool(mallopt(-8, count))  # M_ARENA_MAX (glibc malloc.h); musl answers 0


def keep_large_blocks_mapped() -> bool:
    """glibc: every block of 128 KiB or more gets a mapping of its own, returned to the system when freed (the
    warm process, after a large result). By default glibc raises that threshold to the largest block freed so far
    (up to 32 MiB), so after one 30 MB result the next large strings land in the heap, where fragmentation kept
    +3 to +36 MB after ``malloc_trim``; with it fixed, +2 to +4 MB. A ``MALLOC_MMAP_THRESHOLD_`` the operator set
    wins. True when it was set."""
    mallopt = None if "MALLOC_MMAP_THRESHOLD_" in os.environ else _libc("mallopt")
    return mallopt is not None and bool(mallopt(-3, 128 * 1024))  # M_MMAP_THRESHOLD (glibc malloc.h)


def _libc(name: str) -> Any:
    """libc's function ``name`` on Linux (ctypes), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return getattr(ctypes.CDLL(None), name)
    except (ImportError, OSError, AttributeError):  # no ctypes, or a libc without it (musl has no malloc_trim)
        return None


def resident_set_size() -> int | None:
    """This process's resident set in bytes (Linux ``/proc/self/statm``), or None where it cannot be read."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


def release_free_memory() -> bool:
    """Give the memory Python freed back to the system (glibc ``malloc_trim(0)``): after one large result a
    long-lived process otherwise keeps its peak RSS (the warm process: 24 -> 119 MB until its idle exit), since
    glibc keeps freed heap pages. False elsewhere than glibc."""
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    import gc

    gc.collect()  # cycles a large result left behind (frames of a failed parse, a traceback) go first
    trim(0)
    return True


def run_resident(
    opts: ResidentOptions,
    *,
    stdin: Any,
    stdout: Any,
    log: Log,
    env: Mapping[str, str],
    stderr: IO[str],
    cwd: str | None = None,
) -> int:
    """``bkmcp --resident`` (docs/contract.md §11): serve commands until ``shutdown``, EOF, a terminating signal
    (``_STOP_SIGNALS``: 0) or SIGINT (130), answering every command read before the end.

    ``stdin``/``stdout`` are binary streams. A registry that cannot be opened raises (exit 1, envelope on
    stderr, by ``main``); nothing after that start-up step raises out of here. stdin is read by a thread of its
    own, so the signal handlers only record the signal (no handler ever runs inside a lock's critical section);
    this thread waits for the end, then shuts down.
    """
    import signal
    import threading

    limit_malloc_arenas()
    # system secrets only (see learn_system_secrets); stderr through a LineWriter: a stderr nobody reads never blocks
    # a command (issue 16 item 13), and with --events - the events share it, so lines never interleave
    log_lines = LineWriter(stderr)
    log = log.scoped(Redactor(limit=RESIDENT_SYSTEM_SECRETS), lines=log_lines)
    cwd = os.getcwd() if cwd is None else cwd
    try:
        registry = open_registry(opts.registry, env=env, log=log, timeout=opts.timeout, cwd=cwd)
    except BaseException:
        log_lines.close()  # its lines first, then main's envelope on the same stderr
        raise
    if isinstance(registry, SqliteRegistry) and registry.created:
        log.warn(f"created a new, empty registry {registry.path} (is --registry the path you meant?)")
    _warm_resident_imports(log)
    events_stream: IO[str] | None = None
    if opts.events == "-":
        events_stream = stderr
    elif opts.events is not None:
        try:
            events_path = resolve_user_path(opts.events, env, cwd, option="--events")
            events_stream = open(events_path, "a", encoding="utf-8")  # noqa: SIM115 - lives as long as the process
        except OSError as exc:
            registry.close()
            log_lines.close()
            raise UsageError(f"cannot open --events file {opts.events!r}: {exc.strerror or exc}") from None
    shared = log_lines if opts.events == "-" else None
    events = EventSink(events_stream, log.redactor, owned=opts.events not in (None, "-"), lines=shared)
    server = ResidentServer(opts, registry=registry, stdout=stdout, log=log, events=events, env=env)
    server.pool.start_reaper()
    previous: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():

        def on_signal(signum: int, frame: Any) -> None:
            if server.signalled is None:
                server.signalled = signum

        for name in (*_STOP_SIGNALS, "SIGINT"):
            number = getattr(signal, name, None)
            if number is not None:
                previous[number] = signal.signal(number, on_signal)
    reader = threading.Thread(target=server.read_all, args=(stdin,), name="bkmcp-reader", daemon=True)
    try:
        reader.start()
        while not server.ended.wait(0.1) and server.signalled is None:
            pass
        if server.signalled is None and not server.out.broken:
            # EOF: the commands already read run to their own end; shutdown: they get --shutdown-grace to finish.
            # Either way they are answered with their own results; a signal cuts the wait short.
            server.drain(None if server.shutdown_task is None else opts.shutdown_grace)
        if server.signalled is not None:
            log.debug(f"{signal.Signals(server.signalled).name}: shutting down")
        server.finish(grace=_SHUTDOWN_GRACE)
        if server.shutdown_task is not None:
            server.close_input(stdin, reader, _SHUTDOWN_GRACE)  # each line that came before the answer is answered
            server.out.write({"task_id": server.shutdown_task, "success": True, "result": {"stopped": True}})
        if server.signalled is None and server.shutdown_task is None:  # EOF: the reader ended (or is ending)
            reader.join(1.0)
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler if handler is not None else signal.SIG_DFL)
        try:
            registry.close()
        except Exception as exc:
            log.debug(f"closing the registry failed: {type(exc).__name__}")
        give_up = time.monotonic() + LINES_CLOSE_WAIT  # one bounded wait for both: the exit stays prompt
        events.close(give_up - time.monotonic())
        log_lines.close(give_up - time.monotonic())
    return EXIT_INTERRUPTED if server.signalled == signal.SIGINT else EXIT_OK


# -- 10.5 warm sessions: what the --keep-alive process keeps (docs/contract.md §14) ------------------------------------
# --keep-alive is one room in two sub-sections: this one (deferred in the pyz, with the engine it keeps sessions
# of) and 11.4 (the client and the background process: the client must start without the deferred sections, and
# the process runs ``main``, which a section above 11 cannot name). The background process runs each forwarded
# command line through the CLI's own ``main``; ``WarmSessions`` is the ``SessionSource`` it hands the flows: a kept
# session per key, lent to every command whose resolved server has that key, closed after its idle time, at most
# ``WARM_MAX_SESSIONS``.

WARM_MAX_SESSIONS = 32
_WARM_OPEN_POLL = 0.05  # a command waiting for its key's opening asks this often whether its budget or Ctrl-C ended it


def warm_session_key(server: ResolvedServer, insecure: bool) -> str:
    """Everything that makes a kept session what it is (docs/contract.md §14): ``server.identity()`` (the server as
    resolved after ``${VAR}`` expansion) plus what differs between the commands one process serves: the name and
    config file (two entries never share a session), the passed-through variables (each command brings its
    environment), the auth source, whether a child's output may be quoted, and ``--insecure``."""
    kept_apart_by = (server.name, server.config_file, sorted(server.inherited_env.items()), server.auth_source)
    return server.identity(*kept_apart_by, server.child_output_in_errors, insecure)


@dataclass
class _KeptCatalogue:
    """One listing a warm session keeps: its items, pages, and until when it is fresh (``catalogue_kept_until``:
    its ttlMs from when it was asked, monotonic; None: until notified)."""

    items: list[dict[str, Any]]
    pages: int
    fresh_until: float | None


class _Warm:
    """One kept session: the lock is held while it opens (other commands with its key wait for it)."""

    __slots__ = ("key", "session", "lock", "opened", "used", "calls", "lent", "idle", "catalogues")

    def __init__(self, key: str, idle: float) -> None:
        self.key = key
        self.session: McpSession | None = None
        self.lock = _thread.allocate_lock()
        self.opened = self.used = time.monotonic()
        self.calls = 0
        self.lent = 0  # operations using it now
        self.idle = idle  # closed after this long unused (the --keep-alive of the command that used it last)
        # list method -> its catalogue, kept while the server's word holds (``_WarmSource.kept``)
        self.catalogues: dict[str, _KeptCatalogue] = {}


class WarmSessions:
    """The kept sessions of the warm process, by ``warm_session_key``. ``for_command`` gives one command its
    ``SessionSource``; ``reap`` closes what idled out; ``listing`` is ``bkmcp --sessions``; ``close_all`` the end."""

    def __init__(self, log: Log, *, limit: int = WARM_MAX_SESSIONS) -> None:
        self.log = log  # the process's own log (never a client's stderr: a kept session outlives the command)
        self.limit = limit
        self._entries: dict[str, _Warm] = {}
        self._lock = _thread.allocate_lock()

    def for_command(self, cwd: str, idle: float, *, peek: bool = False) -> SessionSource:
        """``peek``: only a kept, live session answers (a completion, docs/contract.md §2); none is opened."""
        return _WarmSource(self, cwd, idle, peek=peek)

    def _kept_entry(self, key: str) -> _Warm | None:
        """The entry of ``key`` lent to one more command when its session is kept and alive; None otherwise."""
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or not _warm_alive(entry):
                return None
            entry.lent += 1
        return entry

    def _entry(self, key: str, idle: float) -> _Warm | None:
        """The entry of ``key``, lent to one more command; None when ``limit`` entries exist and none of them is
        idle (all in use or opening): the command then runs on a session of its own. The count is checked and the
        entry made under one lock, so any number of commands opening at once never keep more than ``limit``."""
        with self._lock:
            entry = self._entries.get(key)
            evicted: _Warm | None = None
            if entry is None:
                if len(self._entries) >= self.limit:
                    spare = [e for e in self._entries.values() if e.lent == 0 and not e.lock.locked()]
                    if not spare:
                        return None
                    evicted = min(spare, key=lambda e: e.used)  # the least recently used idle one
                    del self._entries[evicted.key]
                entry = self._entries[key] = _Warm(key, idle)
            entry.idle = idle
            entry.lent += 1
        if evicted is not None:
            self._close(evicted)
        return entry

    def _returned(self, entry: _Warm, session: McpSession | None) -> None:
        """A command is done with ``entry`` (``session``: the kept session it used, None when it used none)."""
        with self._lock:
            entry.lent -= 1
            if session is not None:
                entry.used = time.monotonic()
                entry.calls += 1
            dead = session is not None and entry.session is session and not session.alive
            if dead:
                entry.session = None
            if entry.session is None and entry.lent == 0 and self._entries.get(entry.key) is entry:
                del self._entries[entry.key]
        if dead and session is not None:
            session.close(Deadline(2.0))

    def _close(self, entry: _Warm) -> None:
        session, entry.session = entry.session, None
        if session is not None:
            try:
                session.close(Deadline(2.0))
            except Exception as exc:  # closing never fails the process
                self.log.debug(f"closing a warm session failed: {type(exc).__name__}")

    def reap(self, now: float | None = None) -> int:
        """Close the sessions unused for their idle time; how many sessions are left."""
        now = time.monotonic() if now is None else now
        with self._lock:
            gone = [e for e in self._entries.values() if e.lent == 0 and now - e.used >= e.idle]
            gone += [e for e in self._entries.values() if e.lent == 0 and e not in gone and not _warm_alive(e)]
            for entry in gone:
                del self._entries[entry.key]
            left = len(self._entries)
        for entry in gone:
            self._close(entry)
        return left

    def listing(self) -> list[dict[str, Any]]:
        """What ``bkmcp --sessions`` shows: names, transport, pid, ages and counts; never a secret."""
        now = time.monotonic()
        with self._lock:
            entries = sorted(self._entries.values(), key=lambda e: e.opened)
        shown = []
        for entry in entries:
            session = entry.session
            if session is None:
                continue
            shown.append(
                {
                    "server": session.server.name,
                    "config_file": session.server.config_file,
                    "transport": session.server.type,
                    "pid": session.transport.stdio.pid if session.transport.stdio is not None else None,
                    "protocol_version": session.protocol_version,
                    "alive": session.alive,
                    "age_s": round(now - entry.opened, 1),
                    "idle_s": round(now - entry.used, 1) if entry.lent == 0 else 0.0,
                    "in_use": entry.lent,
                    "calls": entry.calls,
                }
            )
        return shown

    def close_all(self) -> None:
        with self._lock:
            entries = list(self._entries.values())
            self._entries.clear()
        run_each(self._close, entries, timeout=5.0)


def _warm_alive(entry: _Warm) -> bool:
    return entry.session is not None and entry.session.alive


class _WarmSource(SessionSource):
    """One command's view of ``WarmSessions``: the kept session of its key, opened (and kept) on first use. While
    another command opens that key's session, this one waits for the opening (within its own time budget), so one
    key reaches one server process (docs/contract.md §14); when the opening failed, the waiter opens afresh, never
    taking a half-open session. When ``WARM_MAX_SESSIONS`` are kept and all in use, it gets a fresh session of its
    own, closed at its end."""

    def __init__(self, warm: WarmSessions, cwd: str, idle: float, *, peek: bool = False) -> None:
        self.warm = warm
        self.cwd = cwd
        self.idle = idle
        self.peek = peek  # lend a kept, live session or fail: never open one
        self._opening: dict[int, _Warm] = {}  # id(session) -> its entry, until negotiated
        self._kept: dict[int, _Warm] = {}  # id(session) -> its entry, lent to this command
        self._fresh: set[int] = set()

    def start(self, server: ResolvedServer, ctx: OpContext, *, insecure: bool) -> McpSession:
        if server.type == "stdio" and server.cwd is None:  # the child runs where the one-shot's would: the client's
            import dataclasses

            server = dataclasses.replace(server, cwd=self.cwd)
        declares = dict(ctx.input.capabilities) if ctx.input is not None else {}
        if ctx.input is not None and ctx.input.resuming and not self.peek:
            # a resumed round (docs/contract.md §5): a session of its own, its request ids from a random number
            session = SessionSource.start(self, server, ctx, insecure=insecure)
            self._fresh.add(id(session))
            return session
        # a legacy session declares at initialize what its first command could answer: one that declares
        # elicitation is kept apart from one that does not
        key = warm_session_key(server, insecure) + (f"|declares {dump_json(declares)}" if declares else "")
        entry = self.warm._kept_entry(key) if self.peek else self.warm._entry(key, self.idle)
        if entry is None and self.peek:
            raise ConnectionFailedError(f"no warm session of {server.name!r} is kept")
        if entry is None:  # at the limit, every kept session in use
            session = SessionSource.start(self, server, ctx, insecure=insecure)
            self._fresh.add(id(session))
            return session
        try:  # another command may be opening it: its outcome (negotiated, or None after a failure) is ours to see
            while not entry.lock.acquire(timeout=min(ctx.deadline.remaining(), _WARM_OPEN_POLL)):
                pass  # remaining() ends the wait: this command's budget spent, or its Ctrl-C
        except BaseException:
            self.warm._returned(entry, None)
            raise
        try:
            kept = entry.session
            if kept is not None and kept.alive:
                self._kept[id(kept)] = entry
                entry.lock.release()
                stdio = kept.transport.stdio  # what its server writes from now is this one's
                ctx.stderr_since = stdio.stderr_position() if stdio is not None else None
                ctx.stdout_since = stdio.stdout_position() if stdio is not None else None
                return kept
            if self.peek:  # pragma: no cover - it died between _kept_entry's look and this one: a peek opens nothing
                raise ConnectionFailedError(f"the warm session of {server.name!r} ended")
            if kept is not None:  # its child died or it closed while idle: a new one
                self.warm._close(entry)
            session = McpSession(server, insecure=insecure, log=self.warm.log, die_with_parent=True)
            session.core.client_capabilities = declares
        except BaseException:
            entry.lock.release()
            self.warm._returned(entry, None)
            raise
        entry.session = session
        self._opening[id(session)] = entry
        self._kept[id(session)] = entry
        return session

    def ready(self, session: McpSession, ctx: OpContext) -> None:
        entry = self._opening.pop(id(session), None)
        if entry is None:
            if id(session) in self._fresh:
                negotiate(session, ctx)
            return  # a kept session: negotiated when it opened
        try:
            negotiate(session, ctx)
            session.mark_started()  # the lines of its start-up are every later command's too
        except BaseException:
            entry.session = None
            raise
        finally:
            entry.lock.release()

    def discover(self, session: McpSession, ctx: OpContext) -> tuple[list[dict[str, Any]], int]:
        return self.kept(session, ctx, LISTINGS["tools/list"])

    def listing(self, session: McpSession, ctx: OpContext, listing: Listing) -> list[dict[str, Any]]:
        return self.kept(session, ctx, listing)[0]

    def kept(self, session: McpSession, ctx: OpContext, listing: Listing) -> tuple[list[dict[str, Any]], int]:
        """The session's kept catalogue of ``listing`` (tools, resources, templates, prompts) while it is fresh by
        the one rule of ``catalogue_kept_until`` (docs/contract.md §14): its ``ttlMs``, the server's list_changed
        for it; ``--tools``, ``--check``, ``--resources`` and ``--prompts`` (``ctx.refresh``) list again."""
        entry = self._kept.get(id(session))
        if entry is None:
            items, pages, _ttl_ms = discover_listing(session, ctx, listing)
            return items, pages
        kept, now = entry.catalogues.get(listing.method), time.monotonic()
        if (
            kept is not None
            and not ctx.refresh
            and entry.session is session
            and catalogue_fresh(kept.fresh_until, listing.method in session.core.stale, now)
        ):
            until = kept.fresh_until
            why = "until a change" if until is None else f"fresh for another {(until - now) * 1000:.0f} ms by its ttlMs"
            ctx.log.debug(f"the catalogue of {len(kept.items)} {listing.noun}(s) is kept ({why})")
            return list(kept.items), kept.pages
        items, pages, ttl_ms = discover_listing(session, ctx, listing)
        entry.catalogues[listing.method] = _KeptCatalogue(list(items), pages, catalogue_kept_until(ttl_ms, now))
        return items, pages

    def done(self, session: McpSession, ctx: OpContext) -> None:
        if id(session) in self._fresh:
            self._fresh.discard(id(session))
            session.close(ctx.deadline)
            return
        entry = self._kept.pop(id(session), None)
        if entry is None:  # pragma: no cover - done without start
            return
        if entry.session is not session:  # it failed to open: never kept
            session.close(ctx.deadline)
        self.warm._returned(entry, session)


# ======================================================================================================
# 11. CLI
# ======================================================================================================

# Where code goes, for the pyz's deferred sections (docs/building.md; the build, zipapp_support.defer_sections,
# refuses a source that breaks a rule and says what to move):
#   * A section whose banner title ends with "— deferred in the pyz" (5-8 and 10) runs on first use in the pyz;
#     consecutive marked sections load together. Marking or unmarking a banner is all it takes to change that.
#   * The help paths (`--help`, `--version`, `<server> --help`, a bare `<server>`) are what `main` reaches before
#     a def line that ends with "# pyz: remote part" (``Runner.run_remote``, ``Runner.run_resident_mode``,
#     ``Runner.cancelled``).
#     Code on a help path lives outside the deferred sections and names nothing they define: a guard there
#     would load them on every `--help`.
#   * A deferred section only defines: defs, classes, imports and assignments to plain names, calling nothing
#     while it runs but zipapp_support.DEFERRABLE_CALLS and the dataclasses it defines.
#   * Outside them, a deferred name is used only inside function bodies: never as a base class, decorator,
#     default value, class attribute or module-level value, and never bound again.

# -- 11.1 argument routing: argv -> Invocation, checked (docs/contract.md §2) ------------------------------------------

_VALUE_OPTIONS = {
    "--config": "config",
    "--timeout": "timeout",
    "--jq": "jq",
    "--context": "context",
    "--body": "body",
    "--registry": "registry",
    "--out": "out",
    "--max-blob-bytes": "max_blob_bytes",
    "--inputs": "inputs",
    "--input-action": "input_action",
    "--resume": "resume",
}
_FLAG_OPTIONS = {
    "-v": "verbose",
    "--verbose": "verbose",
    "--insecure": "insecure",
    "--check": "check",
    "--tools": "tools",
    "--dry-run": "dry_run",
    "-h": "help",
    "--help": "help",
    "--version": "version",
    "--resident": "resident",
    "-r": "raw",
    "--raw": "raw",
    "--task": "task",  # a call run as a task (docs/contract.md §5 "Tasks"): reserved, as --timeout is (§6)
    "--detach": "detach",
}
# `bkmcp --registry FILE --import mcp.json | --list` (contract §11.3): options only before any server name, so a tool's
# own `--list`/`--import` parameter (after the tool name) keeps working as a tool option.
# `--completion SHELL` is the same kind of root-only option.
_REGISTRY_VALUE_OPTIONS = {"--import": "registry_import", "--completion": "completion"}
_REGISTRY_FLAG_OPTIONS = {"--list": "registry_list", "--sessions": "sessions", "--stop": "stop"}
_REGISTRY_OPTION_NAMES = frozenset({*_REGISTRY_VALUE_OPTIONS, *_REGISTRY_FLAG_OPTIONS})
_RESIDENT_OPTIONS = {
    "--events": "events",
    "--max-processes": "max_processes",
    "--max-user-processes": "max_user_processes",
    "--idle-timeout": "idle_timeout",
    "--shutdown-grace": "shutdown_grace",
    "--max-blob-bytes": "max_blob_bytes",
    "--elicitation": "elicitation",
    "--input-timeout": "input_timeout",
}
_RESIDENT_FLAG_OPTIONS = {"--inject-resource-tools": "inject_resource_tools"}
_RESERVED_UNSUPPORTED = {"--format"}
# `bkmcp <server> --resources | --prompts | --read URI | --prompt NAME` (contract §2): before a tool name (and
# before --read's URI or --prompt's name) only, as --brief: after one, such a name is that tool's, template's or
# prompt's own flag (contract §6).
_CATALOGUE_FLAGS = {"--resources": "resources", "--prompts": "prompts", "--skills": "skills", "--tasks": "tasks"}
_TARGET_OPTIONS = {"--read": "read", "--prompt": "prompt", "--skill": "skill"}
# `bkmcp <server> --task-status ID | --task-result ID [--wait] | --task-cancel ID` (contract §5 "Tasks"): before a
# tool name only, as --resources (a tool's own --wait or --task-status keeps working after the tool name).
_TASK_OPTIONS = {"--task-status": "task_status", "--task-result": "task_result", "--task-cancel": "task_cancel"}
# every option of the root parser, with its Invocation attribute
ROOT_OPTIONS = {
    **_VALUE_OPTIONS,
    **_FLAG_OPTIONS,
    **_REGISTRY_VALUE_OPTIONS,
    **_REGISTRY_FLAG_OPTIONS,
    **_RESIDENT_OPTIONS,
    **_RESIDENT_FLAG_OPTIONS,
}
ROOT_OPTIONS.update({**_CATALOGUE_FLAGS, **_TARGET_OPTIONS, "--brief": "brief", "--keep-alive": "keep_alive"})
ROOT_OPTIONS.update({**_TASK_OPTIONS, "--wait": "wait"})
ROOT_OPTIONS["--input"] = "input"  # repeatable (docs/contract.md §5)
# every long option, for the close spellings of an unknown one (`--chek`: did you mean --check?)
_LONG_OPTIONS = tuple(name for name in ROOT_OPTIONS if name.startswith("--"))


@dataclass
class Invocation:
    """The command line, parsed but not yet acted upon."""

    server: str | None = None
    tool: str | None = None
    config: str | None = None
    timeout: str | None = None  # as written; ``timeout_seconds`` is the value
    jq: str | None = None
    context: str | None = None
    body: str | None = None
    registry: str | None = None
    verbose: bool = False
    insecure: bool = False
    check: bool = False
    tools: bool = False
    dry_run: bool = False
    help: bool = False
    version: bool = False
    resident: bool = False
    brief: bool = False  # --tools --brief: a compact catalogue (docs/contract.md §7); before the tool name only
    resources: bool = False  # --resources, --prompts, --read URI, --prompt NAME: before a tool name only
    prompts: bool = False
    read: str | None = None  # a URI or a URI template (its variables: tool_tokens)
    prompt: str | None = None  # a prompt's name (its arguments: tool_tokens)
    skills: bool = False  # --skills, --skill NAME (SEP-2640): before a tool name only, as --resources
    skill: str | None = None
    raw: bool = False  # -r/--raw: a call's result as text; with --jq, strings unquoted (docs/contract.md §7)
    task: bool = False  # --task: the call runs as a task, waited for (docs/contract.md §5 "Tasks")
    detach: bool = False  # --detach: a task's handle printed instead of its result
    tasks: bool = False  # --tasks: this user's task handles of the server (and its tasks/list)
    task_status: str | None = None  # --task-status ID, --task-result ID [--wait], --task-cancel ID
    task_result: str | None = None
    task_cancel: str | None = None
    wait: bool = False
    out: str | None = None  # --out DIR|-: blobs to files, or the one blob to stdout (docs/contract.md §7)
    max_blob_bytes: str | None = None  # as written; ``blob_limit`` is --out's value (the resident's: section 10)
    blob_limit: int = MAX_BLOB_BYTES
    registry_import: str | None = None
    registry_list: bool = False
    completion: str | None = None  # --completion bash|zsh|fish|servers (root only)
    events: str | None = None  # --resident only: the options of _RESIDENT_OPTIONS
    max_processes: str | None = None
    max_user_processes: str | None = None
    idle_timeout: str | None = None
    shutdown_grace: str | None = None  # (--max-blob-bytes: with --out above, or the resident's blob cap)
    elicitation: str | None = None
    input_timeout: str | None = None
    inject_resource_tools: bool = False
    keep_alive: str | None = None  # --keep-alive ("") or --keep-alive=DURATION (docs/contract.md §14)
    # answers to a server's questions (docs/contract.md §5): --input FIELD=VALUE (repeatable), --inputs
    # JSON|@FILE|-, --input-action decline|cancel; --resume ID answers a round an earlier command kept
    input: list[tuple[str, str]] = field(default_factory=list)
    inputs: str | None = None
    input_action: str | None = None
    resume: str | None = None
    sessions: bool = False  # --sessions [--stop] (root only)
    stop: bool = False
    tool_tokens: list[ToolToken] = field(default_factory=list)
    # bare values after the tool, each with the flag whose value it follows: an error naming the tool's flags
    positional: list[tuple[str, str | None]] = field(default_factory=list)
    argv: list[str] = field(default_factory=list)  # as given (a warm client forwards it)
    timeout_seconds: float = DEFAULT_TIMEOUT  # --timeout, parsed once by check_invocation; everything reads this


def _is_bkmcp_option(token: str) -> bool:
    name = token.split("=", 1)[0]
    return name in _VALUE_OPTIONS or name in _FLAG_OPTIONS or name in ("--keep-alive", "--input")


def parse_argv(argv: Sequence[str]) -> Invocation:
    """Route the command line (docs/contract.md §2). Global options may stand before or after the server name.

    After the tool name, every other ``--name`` is a tool option: ``--name=value`` or ``--name value`` (the next
    token is the value, unless it is itself a bkmcp option: then ``--name`` has no value).
    """
    inv = Invocation(argv=list(argv))
    seen: set[str] = set()
    tokens = list(argv)
    # the resident options exist only beside --resident: elsewhere they stay free for tool flags
    value_options = {**_VALUE_OPTIONS, **_RESIDENT_OPTIONS} if "--resident" in tokens else _VALUE_OPTIONS
    flag_options = {**_FLAG_OPTIONS, **_RESIDENT_FLAG_OPTIONS} if "--resident" in tokens else _FLAG_OPTIONS
    i = 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        name, eq, inline = token.partition("=")
        registry_tool = inv.server is None and (name in _REGISTRY_VALUE_OPTIONS or token in _REGISTRY_FLAG_OPTIONS)
        # later flags are its own (a skill has none: any is refused)
        target = inv.tool is not None or inv.read is not None or inv.prompt is not None or inv.skill is not None
        if not target and (token in _CATALOGUE_FLAGS or name in _TARGET_OPTIONS):
            attr = _CATALOGUE_FLAGS.get(token) or _TARGET_OPTIONS[name]
            if attr in seen:
                raise UsageError(f"option {name} given more than once")
            seen.add(attr)
            if token in _CATALOGUE_FLAGS:
                setattr(inv, attr, True)
                continue
            if not eq and i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                inline, i = tokens[i], i + 1
            elif not eq:
                raise UsageError(f"option {name} needs a value", hint=f"write {name}=VALUE for a value starting with -")
            if not inline:
                raise UsageError(f"option {name} needs a {dict(read='URI').get(attr, attr + ' name')}")
            setattr(inv, attr, inline)
            continue
        if name in _TASK_OPTIONS and not target:
            attr = _TASK_OPTIONS[name]
            if attr in seen:
                raise UsageError(f"option {name} given more than once")
            seen.add(attr)
            if not eq and i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                inline, i = tokens[i], i + 1
            elif not eq:
                raise UsageError(f"option {name} needs a task id", hint=f"bkmcp <server> {name} ID")
            if not inline:
                raise UsageError(f"option {name} needs a task id", hint=f"bkmcp <server> {name} ID")
            setattr(inv, attr, inline)
            continue
        if token == "--wait" and not target:  # with --task-result only (check_invocation)
            if inv.wait:
                raise UsageError("option --wait given more than once")
            inv.wait = True
            continue
        if token == "--brief" and not target:  # after a tool name (or --read/--prompt's), --brief is its own flag
            if inv.brief:
                raise UsageError("option --brief given more than once")
            inv.brief = True
            continue
        if name == "--input":  # repeatable, anywhere: FIELD=VALUE (docs/contract.md §5)
            if eq:
                value = inline
            elif i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                value, i = tokens[i], i + 1
            else:
                raise UsageError("option --input needs FIELD=VALUE", hint="write --input name=Ada")
            answer_field, has_value, answer_text = value.partition("=")
            if not has_value or not answer_field:
                raise UsageError(f"--input takes FIELD=VALUE, got {short_text(value)!r}", hint="write --input name=Ada")
            inv.input.append((answer_field, answer_text))
            continue
        if name == "--keep-alive":  # an optional value, only as --keep-alive=DURATION (docs/contract.md §14)
            if inv.keep_alive is not None:
                raise UsageError("option --keep-alive given more than once")
            inv.keep_alive = inline if eq else ""
            if eq and not inline:
                raise UsageError("--keep-alive= needs a duration", hint="write --keep-alive=10m, or --keep-alive alone")
            continue
        if token.startswith("--") and (name in value_options or registry_tool and name in _REGISTRY_VALUE_OPTIONS):
            attr = value_options.get(name) or _REGISTRY_VALUE_OPTIONS[name]
            if attr in seen:
                raise UsageError(f"option {name} given more than once")
            seen.add(attr)
            if eq:
                value = inline
            elif (
                i < len(tokens)
                and not _is_bkmcp_option(tokens[i])
                and not (inv.server is None and tokens[i].split("=", 1)[0] in _REGISTRY_OPTION_NAMES)
            ):
                value = tokens[i]
                i += 1
            else:  # `--body --dry-run` must not silently make "--dry-run" the body (and skip the dry run)
                raise UsageError(f"option {name} needs a value", hint=f"write {name}=VALUE for a value starting with -")
            setattr(inv, attr, value)
        elif token in flag_options or registry_tool:
            attr = flag_options.get(token) or _REGISTRY_FLAG_OPTIONS[token]
            if attr in seen and attr not in ("verbose", "help"):
                raise UsageError(f"option {token} given more than once")
            seen.add(attr)
            setattr(inv, attr, True)
        elif token.startswith("-") and token != "-":
            if name in _RESERVED_UNSUPPORTED:
                raise UnsupportedOptionError(f"option {name} is reserved and not supported by bkmcp")
            if name in _FLAG_OPTIONS:
                raise UsageError(f"option {name} takes no value")
            if not target or not token.startswith("--") or len(name) <= 2:
                where = "" if not target else " (tool options look like --name value or --name=value)"
                close = closest_names(name, _LONG_OPTIONS) if not target else []
                hint = f"did you mean {', '.join(close)}? (every option: bkmcp --help)" if close else "run bkmcp --help"
                raise UsageError(f"unknown option {name}{where}", hint=hint)
            flag = name[2:]
            if eq:
                inv.tool_tokens.append(ToolToken(flag, inline, True, token))
            elif i < len(tokens) and not _is_bkmcp_option(tokens[i]):
                inv.tool_tokens.append(ToolToken(flag, tokens[i], False, token))
                i += 1
            else:
                inv.tool_tokens.append(ToolToken(flag, None, False, token))
        elif inv.server is None:
            problem = check_server_name(token)
            if problem:
                raise UsageError(f"invalid server name {token!r}: {problem}", hint="run bkmcp --help")
            inv.server = token
        elif inv.tool is None:
            if not token:
                raise UsageError("a tool name must not be empty")
            inv.tool = token
        else:
            last = inv.tool_tokens[-1] if inv.tool_tokens else None
            if last is None or last.has_equals or not (last.value or "").startswith("-"):
                # the tool's flags, once discovered, tell how to write it (run_tool); after a flag's value it is
                # likely the rest of that value
                follows = last.name if last is not None and last.value is not None and not last.has_equals else None
                inv.positional.append((token, follows))
                continue
            # "--loud --text x": --loud took "--text" as its value, which left "x" over
            raise UsageError(
                f"unexpected argument {token!r}",
                hint=f"--{last.name} took {last.value!r} as its value; a boolean flag needs "
                f"--{last.name}=true or --{last.name}=false, and a value starting with '-' can be given as "
                f"--{last.name}=VALUE",
            )
    return inv


# The words MODE_TABLE names options by (a refusal lists them in this order), each with its Invocation attribute.
INVOCATION_WORDS = {
    **{"--resident": "resident", "a server name": "server", "a tool": "tool", "--check": "check", "--tools": "tools"},
    **{"--resources": "resources", "--prompts": "prompts", "--read": "read", "--prompt": "prompt", "--body": "body"},
    **{"--dry-run": "dry_run", "--config": "config", "--jq": "jq", "--raw": "raw", "--help": "help", "-v": "verbose"},
    **{"--brief": "brief", "--keep-alive": "keep_alive", "tool flags": "tool_tokens", "bare arguments": "positional"},
}
INVOCATION_WORDS.update((w, a) for w, a in ROOT_OPTIONS.items() if a not in INVOCATION_WORDS.values())  # -h: --help's
# A refusal's or a need's words: (sentence, hint), with {mode}, {got} (the options refused) and {inv} filled in.
_REGISTRY_WORDS = "--import and --list take a --registry FILE and nothing else but -v and --timeout"
_RESIDENT_CLI = "--resident cannot be combined with {got}: the resident mode takes its servers from --registry and "
USAGE_WORDS: dict[str, tuple[str, str | None]] = {
    "sessions": ("--sessions takes nothing else but --stop and --jq [--raw]", "bkmcp --sessions | bkmcp --sessions "
                 "--stop | bkmcp --sessions --jq '.data.sessions[].server'"),
    "shell": ("--completion takes nothing else but --config", "bkmcp --completion bash"),
    "words": ("--completion tools|prompts|resources takes a server name, --completion flags a server and a tool name "
              "(or --prompt NAME, --read TEMPLATE), --completion values a server, --prompt NAME or --read TEMPLATE and "
              "its flags, and nothing else but --config",
              "bkmcp --completion flags SERVER TOOL (what the completion scripts run)"),
    "registry": (_REGISTRY_WORDS, "bkmcp --registry FILE --import mcp.json | bkmcp --registry FILE --list"),
    "registry got": (_REGISTRY_WORDS + " (got {got})", "bkmcp --registry FILE --import mcp.json | bkmcp --registry "
                     "FILE --list"),
    "resident modes": ("--resident takes no server, tool or mode options", None),
    "resident cli": (_RESIDENT_CLI + "answers every command in full", "remove {got}"),
    "resident registry": ("--resident needs --registry SOURCE (a SQLite file or an http(s)://…/internal/mcp/config "
                          "URL)", "bkmcp --resident --registry ./registry.db"),
    "body": ("{mode} takes no --body", None),
    "dry-run": ("--dry-run cannot be combined with {mode}", None),
    "modes": ("{mode} and {got} cannot be combined: choose one mode", None),
    "server": ("a server name is required", "bkmcp <server> --check"),
    "dry-run help": ("--dry-run cannot be combined with tool --help (tool help needs discovery)", None),
    "dry-run flags": ("--dry-run does not accept named tool flags (got --{inv.tool_tokens[0].name})",
                      "put every argument into --body"),
    "dry-run other": ("--dry-run cannot be combined with {got}", None),
    "dry-run tool": ("--dry-run needs a tool and --body", "bkmcp <server> <tool> --body '{{}}' --dry-run"),
    "dry-run body": ("--dry-run needs a complete --body (flag types come from the server, which dry-run never "
                     "contacts)", "use --body '{{...}}' (or --body '{{}}' for a tool without arguments)"),
    "stop": ("--stop is only valid with --sessions", "bkmcp --sessions --stop"),
    "registry only": ("--registry is only valid with --resident, --import or --list", None),
    "brief": ("--brief is only valid with --tools or --resources", "bkmcp <server> --tools --brief"),
    "body needs": ("--body needs a tool: bkmcp <server> <tool> --body JSON|@FILE|-", None),
    "one mode": ("{modes} cannot be combined: choose one mode", None),
    "task needs": ("{mode} needs a tool call", "bkmcp <server> <tool> [--flags] {mode}"),
    "wait": ("--wait is only valid with --task-result", "bkmcp <server> --task-result ID --wait"),
    "resume": ("--resume takes only the answers (--input, --inputs, --input-action)", None),
}  # fmt: skip
EVERY_MODE_TAKES = "-v, --timeout, --insecure, --keep-alive, --version, --context"  # --context: refused before
_SERVER = "a server name, --config, --jq, --raw, --help"
_RESIDENT_TAKES = "--resident, --registry, --help, " + ", ".join({**_RESIDENT_OPTIONS, **_RESIDENT_FLAG_OPTIONS})
_SERVER_MODE = ("--body: body; --dry-run: dry-run; *: modes", "a server name: server")
_OUT = "--out, --max-blob-bytes, "  # docs/contract.md §7 "Blobs to files": the modes with a result
_ANSWERS = "--input, --inputs, --input-action, "  # a question's answers (docs/contract.md §5)
# Which options each mode takes (docs/contract.md §2), a row per mode, and the options only some modes take: tried in
# order, read across: when the row applies; what it takes besides EVERY_MODE_TAKES ("A+B": A only beside B); what it
# refuses ("OPTIONS: WORDS; …", "*": any other) and needs ("OPTION|OPTION: WORDS; …"; "-": never there), worded in
# USAGE_WORDS. A new mode is one row; a new option, a word in INVOCATION_WORDS and in the rows that take it.
MODE_TABLE: dict[str, tuple[Callable[[Invocation], bool], str, str, str]] = {
    "--stop": (lambda inv: inv.stop, "", "", "--sessions: stop"),
    "--sessions": (lambda inv: inv.sessions and not inv.help, "--sessions, --stop, --jq, --raw+--jq, --config",
                   "*: sessions", ""),
    "--completion SHELL": (lambda inv: inv.completion not in (None, *COMPLETION_SERVER_WORDS), "--completion, --config",
                           "*: shell", ""),
    "--completion tools": (lambda inv: inv.completion in ("tools", "prompts", "resources"),
                           "--completion, --config, a server name", "*: words", "a server name: words"),
    "--completion flags": (lambda inv: inv.completion == "flags",
                           "--completion, --config, a server name, a tool, --read, --prompt", "*: words",
                           "a tool|--read|--prompt: words"),
    "--completion values": (lambda inv: inv.completion == "values",
                            "--completion, --config, a server name, --read, --prompt, tool flags", "*: words",
                            "--read|--prompt: words; tool flags: words"),
    "--registry": (lambda inv: inv.registry is not None, "", "", "--resident|--import|--list: registry only"),
    "--import, --list": (lambda inv: inv.registry_import is not None or inv.registry_list,
                         "--import, --list, --registry, --help", "*: registry got", "--registry: registry"),
    "one mode at a time": (lambda inv: sum(on for _, on in invocation_modes(inv)) > 1, "", "", "-: one mode"),
    "--brief": (lambda inv: inv.brief, "", "", "--tools|--resources: brief"),
    "--resident": (lambda inv: inv.resident, _RESIDENT_TAKES,
                   "a server name, a tool, --check, --tools, --resources, --prompts, --read, --prompt, --skills, "
                   "--skill: resident modes; --jq, --raw, --config, --dry-run: resident cli; *: resident cli",
                   "--registry|--help: resident registry"),
    "--check": (lambda inv: inv.check, "--check, " + _SERVER, *_SERVER_MODE),
    "--tools": (lambda inv: inv.tools, "--tools, --brief, " + _SERVER, *_SERVER_MODE),
    "--resources": (lambda inv: inv.resources, "--resources, --brief, " + _SERVER, *_SERVER_MODE),
    "--prompts": (lambda inv: inv.prompts, "--prompts, " + _SERVER, *_SERVER_MODE),
    "--read": (lambda inv: inv.read is not None, "--read, tool flags, --completion, " + _ANSWERS + _OUT + _SERVER,
               *_SERVER_MODE),
    "--prompt": (lambda inv: inv.prompt is not None, "--prompt, tool flags, --completion, " + _ANSWERS + _OUT
                 + _SERVER, *_SERVER_MODE),
    "--skills": (lambda inv: inv.skills, "--skills, " + _SERVER, *_SERVER_MODE),
    "--skill": (lambda inv: inv.skill is not None, "--skill, " + _OUT + _SERVER, *_SERVER_MODE),
    "--resume": (lambda inv: inv.resume is not None, "--resume, " + _ANSWERS + _SERVER, "*: resume",
                 "a server name: server"),
    "--wait": (lambda inv: inv.wait, "", "", "--task-result: wait"),
    "--task": (lambda inv: inv.task and not inv.help, "", "", "a tool: task needs"),
    "--detach": (lambda inv: inv.detach and not inv.help, "", "", "a tool: task needs"),
    "--tasks": (lambda inv: inv.tasks, "--tasks, " + _SERVER, *_SERVER_MODE),
    "--task-status": (lambda inv: inv.task_status is not None, "--task-status, " + _SERVER, *_SERVER_MODE),
    "--task-result": (lambda inv: inv.task_result is not None, "--task-result, --wait, " + _SERVER, *_SERVER_MODE),
    "--task-cancel": (lambda inv: inv.task_cancel is not None, "--task-cancel, " + _SERVER, *_SERVER_MODE),
    "--body": (lambda inv: inv.body is not None, "", "", "a tool|--help: body needs"),
    "a tool call": (lambda inv: inv.tool is not None,
                    "a tool, --body, --dry-run, tool flags, bare arguments, --completion, --task, --detach, "
                    + _ANSWERS + _OUT + _SERVER, "*: modes", ""),
    "--dry-run": (lambda inv: inv.dry_run, "--dry-run, a tool, --body, bare arguments, a server name, --config, --jq, "
                  "--raw", "--help: dry-run help; tool flags: dry-run flags; *: dry-run other",
                  "a tool: dry-run tool; --body: dry-run body"),
}  # fmt: skip


def check_invocation(inv: Invocation, timeout: float | None = None) -> None:
    """Mode exclusivity and option combinations (docs/contract.md §2, seed §3, §8 dry-run), derived from
    ``MODE_TABLE``; sets ``inv.timeout_seconds``: ``timeout`` when given (a warm client's,
    parsed by that client), else ``--timeout`` parsed (a bad value is a usage error)."""
    if inv.context is not None:
        raise UnsupportedOptionError(
            "--context is not supported: bkmcp takes identity only from the server's headers in mcp.json",
            hint="remove --context; configure the server's headers instead",
        )
    if inv.completion is not None and inv.completion not in (*COMPLETION_SHELLS, *COMPLETION_WORDS):
        raise UsageError(
            f"--completion takes bash, zsh or fish, got {inv.completion!r}", hint='eval "$(bkmcp --completion bash)"'
        )
    check_input_options(inv)
    given = [word for word, attr in INVOCATION_WORDS.items() if getattr(inv, attr) not in (None, False, [])]
    modes = [m for m, on in invocation_modes(inv) if on]
    for mode, row in MODE_TABLE.items():
        if row[0](inv):
            check_mode_row(mode, inv, given, " and ".join(modes))
    if inv.registry_import is not None and inv.registry_list:
        raise usage_words("registry")
    if inv.positional and (inv.help or inv.body is not None or inv.dry_run):
        # a plain call hears about it after discovery, with the tool's flags (run_tool); these never discover
        raise UsageError(
            f"unexpected argument {inv.positional[0][0]!r}",
            hint="tool arguments are flags (--name VALUE)" + (" or keys of --body" if inv.body is not None else ""),
        )
    task_modes = inv.tasks or inv.task_status is not None or inv.task_cancel is not None
    catalogue = inv.check or inv.tools or inv.resources or inv.prompts or inv.skills or task_modes
    brief_lines = inv.tools and inv.brief  # --tools --brief --raw: one line per tool (docs/contract.md §7)
    if inv.raw and inv.jq is None and not inv.help and not brief_lines and (catalogue or inv.dry_run or inv.detach):
        # without --jq there is no result to print as text: a catalogue, preview or task handle is JSON by nature
        mode = "--detach" if inv.detach and not catalogue else modes[0] if modes else "--dry-run"
        raise UsageError(
            f"--raw prints a tool call's result as text; {mode} has none",
            hint="drop --raw, or add --jq EXPR to print the strings it selects unquoted "
            "(e.g. --tools --jq '.data.tools[].name' --raw)",
        )
    if (inv.out is not None or inv.max_blob_bytes is not None) and not inv.resident:  # the resident's own cap: 10
        _check_out_options(inv)
    if timeout is not None:
        inv.timeout_seconds = timeout
    elif inv.timeout is not None:
        inv.timeout_seconds = parse_duration(inv.timeout)


def _check_out_options(inv: Invocation) -> None:
    """``--out DIR|-`` and ``--max-blob-bytes N`` (docs/contract.md §7 "Blobs to files"): with a command that has a
    result with blobs (``--read``, ``--prompt``, a tool call, ``--skill``); ``--out -`` is the one blob's bytes on
    stdout, so neither ``--jq`` nor ``--raw``; sets ``inv.blob_limit``."""
    if inv.max_blob_bytes is not None:
        text = inv.max_blob_bytes
        if inv.out is None:
            raise UsageError("--max-blob-bytes is only valid with --out", hint="bkmcp <server> --read URI --out DIR")
        if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 2**50:
            raise UsageError(f"--max-blob-bytes must be a positive number of bytes, got {short_text(text)!r}")
        inv.blob_limit = int(text)
    if inv.out == "":
        raise UsageError("--out needs a directory, or - for the one blob's bytes on stdout")
    with_result = inv.read is not None or inv.prompt is not None or inv.skill is not None
    if not inv.help and not (with_result or inv.tool is not None):  # a mode without a result: MODE_TABLE's words
        raise UsageError(
            "--out writes the blobs of a result: it is valid with --read, --prompt, --skill or a tool call",
            hint="bkmcp <server> --read URI --out DIR",
        )
    if inv.out == "-" and (inv.jq is not None or inv.raw):
        raise UsageError(
            "--out - writes the blob's bytes to stdout: it takes neither --jq nor --raw",
            hint="use --out DIR to keep the envelope (--jq '.data' then shows each file's path)",
        )


def check_mode_row(mode: str, inv: Invocation, given: list[str], modes: str) -> None:
    """A mode that was given, against its row of ``MODE_TABLE``: what it does not take refused, what it needs."""
    _, takes, refusals, needs = MODE_TABLE[mode]
    taken = {*takes.split(", "), *EVERY_MODE_TAKES.split(", ")}
    refused = [word for word in given if word not in taken and not any(f"{word}+{w}" in taken for w in given)]
    for names, key in (part.split(": ") for part in refusals.split("; ") if part):
        got = [word for word in (refused if names == "*" else names.split(", ")) if word in refused]
        if got:
            raise usage_words(key, mode=mode, got=", ".join(got), inv=inv, modes=modes)
    for names, key in (part.split(": ") for part in needs.split("; ") if part):
        if not any(word in given for word in names.split("|")):
            raise usage_words(key, mode=mode, inv=inv, modes=modes)


def usage_words(key: str, **fill: Any) -> UsageError:
    message, hint = USAGE_WORDS[key]
    return UsageError(message.format(**fill), hint=hint.format(**fill) if hint else None)


SERVER_MODES = (
    "--check",
    "--tools",
    "--resources",
    "--prompts",
    "--read",
    "--prompt",
    "--skills",
    "--skill",
    "--tasks",
    "--task-status",
    "--task-result",
    "--task-cancel",
    "a tool call",
    "--resume",
)


def check_input_options(inv: Invocation) -> None:
    """``--input``, ``--inputs``, ``--input-action`` and ``--resume`` (docs/contract.md §2, §5): answers go with a
    tool call, ``--prompt``, ``--read`` or ``--resume``; an explicit refusal goes alone."""
    answers = bool(inv.input) or inv.inputs is not None
    if inv.input_action is not None and inv.input_action not in ("decline", "cancel"):
        raise UsageError(
            f"--input-action takes decline or cancel, got {short_text(inv.input_action)!r}",
            hint="--input-action cancel (or decline: the server is told you refused)",
        )
    if inv.input_action is not None and answers:
        raise UsageError("--input-action cannot be combined with --input or --inputs: answer, or refuse")
    target = inv.tool is not None or inv.prompt is not None or inv.read is not None or inv.resume is not None
    if (answers or inv.input_action is not None) and not target and not inv.help:
        raise UsageError(
            "--input, --inputs and --input-action go with a tool call, --prompt, --read or --resume",
            hint="bkmcp <server> <tool> --input FIELD=VALUE",
        )
    if inv.inputs == "-" and inv.body == "-":
        raise UsageError("--body - and --inputs - cannot both read stdin", hint="put one of them in a file: @FILE")


def invocation_modes(inv: Invocation) -> tuple[tuple[str, bool], ...]:
    """The modes of a command line, each with whether it was given: at most one may be (docs/contract.md §2)."""
    return tuple((mode, MODE_TABLE[mode][0](inv)) for mode in SERVER_MODES)


# -- 11.2 --body: inline, @FILE or - (stdin), read and bounded (docs/contract.md §2, §6) -------------------------------

BODY_LIMIT = 64 * 1024 * 1024  # bytes of --body (inline, @FILE or -): tool arguments, not a data transfer


def read_body(
    source: str,
    stdin: IO[str],
    cwd: str,
    deadline: Deadline | None = None,
    *,
    env: Mapping[str, str] | None = None,
    option: str = "--body",
) -> dict[str, Any]:
    """``--body JSON | @FILE | -``: the complete arguments object (P04, P06). stdin is read once. ``--inputs``
    (``option``) is read the same way: an object of answers (docs/contract.md §5).

    Messages name the source as written (``--body``, ``--body @args.json``, ``--body -``). At most
    ``BODY_LIMIT`` bytes are read, and a FIFO or pipe that never delivers is bounded by ``deadline``.
    """
    what = "the tool's arguments" if option == "--body" else "answers by field, or by question key"
    if source == "-":
        label = f"{option} -"
        raw = read_body_stream(stdin, label, deadline)
    elif source.startswith("@"):
        label = f"{option} {source}"
        if not source[1:]:
            raise UsageError(
                f"{option} @FILE needs a file name", hint=f"write {option} @args.json, or {option} - for stdin"
            )
        path = resolve_user_path(source[1:], os.environ if env is None else env, cwd, option=label)
        raw = load_body_file(path, label, deadline)
    else:
        label = option
        try:
            raw = source.encode("utf-8")
        except UnicodeEncodeError:  # undecodable argv bytes arrive as lone surrogates (PEP 383)
            raise InvalidArgumentsError(f"{option} is not valid JSON: input is not valid UTF-8") from None
        if len(raw) > BODY_LIMIT:
            raise _body_too_large(label)
    if not raw.strip():
        raise InvalidArgumentsError(f"{label} is empty", hint=f"use {option} '{{}}' for an empty object")
    try:
        value = parse_json(raw)
    except JsonInputError as exc:
        raise InvalidArgumentsError(
            f"{label} is not valid JSON: {exc}", hint=f"{option} takes one strict JSON object"
        ) from None
    if not isinstance(value, dict):
        kind = "an array" if isinstance(value, list) else "a scalar"
        raise InvalidArgumentsError(
            f"{label} must be a JSON object ({what}), got {kind}",
            hint='wrap the values in an object, e.g. {"name": …}',
        )
    return value


def _body_too_large(label: str) -> InvalidArgumentsError:
    return InvalidArgumentsError(
        f"{label} is larger than {BODY_LIMIT // (1024 * 1024)} MiB",
        hint="tool arguments are limited to 64 MiB; pass large data by reference (a path or URL the tool reads)",
    )


def load_body_file(path: str, label: str, deadline: Deadline | None) -> bytes:
    """The bytes of ``--body @FILE``. Opened without blocking, so a FIFO with no writer waits at most until the
    deadline instead of forever; /dev/zero and other endless files stop at ``BODY_LIMIT``."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, os.O_RDONLY | nonblocking | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0))
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the path
        shown = label if path == label[len("--body @") :] else f"{label} ({path})"
        raise UsageError(f"cannot read {shown}: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return _read_body_fd(fd, label, deadline if nonblocking else None, path)
    finally:
        os.close(fd)


def read_body_stream(stdin: IO[str], label: str, deadline: Deadline | None) -> bytes:
    """``--body -``: stdin's bytes, bounded like a file; an injected stream without a descriptor (tests,
    embedding) is read directly, up to the limit."""
    try:
        fd = stdin.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError and a ValueError
        fd = -1
    if fd >= 0:
        return _read_body_fd(fd, label, deadline, "stdin")
    try:
        raw = stdin.buffer.read(BODY_LIMIT + 1) if hasattr(stdin, "buffer") else stdin.read(BODY_LIMIT + 1)
    except (OSError, ValueError, AttributeError) as exc:  # AttributeError: no stdin at all (fd 0 closed)
        raise UsageError(f"cannot read {label} (stdin): {exc}") from None
    data = raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape")
    if len(data) > BODY_LIMIT:
        raise _body_too_large(label)
    return data


def _read_body_fd(fd: int, label: str, deadline: Deadline | None, where: str) -> bytes:
    """Read ``fd`` to its end: at most ``BODY_LIMIT`` bytes, waiting for data no longer than ``deadline``."""
    import select

    poller = select.poll() if hasattr(select, "poll") else None  # not on Windows: plain blocking reads
    if poller is not None:
        poller.register(fd, select.POLLIN)
    chunks: list[bytes] = []
    size = 0
    while True:
        if poller is not None:
            wait = None
            if deadline is not None:
                left = deadline.left()
                if left <= 0:
                    raise UsageError(
                        f"{label} delivered no end of input within --timeout {format_duration(deadline.seconds)}",
                        hint=f"{where} waits for a writer (a FIFO or pipe?): write the JSON and close it, or pass "
                        "a regular file",
                    )
                wait = max(1, int(left * 1000) + 1)
            if not poller.poll(wait):
                continue
        try:
            chunk = os.read(fd, min(1 << 20, BODY_LIMIT + 1 - size))
        except BlockingIOError:  # readable a moment ago, empty now
            continue
        except OSError as exc:  # e.g. a directory (EISDIR)
            shown = label if where == label[len("--body @") :] else f"{label} ({where})"
            raise UsageError(f"cannot read {shown}: {exc.strerror or exc}") from None
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > BODY_LIMIT:
            raise _body_too_large(label)


# -- 11.3 the runner: one command from its Invocation to its envelope --------------------------------------------------


@dataclass
class Environment:
    """What ``main`` may touch: streams, environment variables and working directory (tests inject them)."""

    stdin: IO[str]
    stdout: IO[str]
    stderr: IO[str]
    env: Mapping[str, str]
    cwd: str
    warm: WarmRun | None = None  # set by the warm process for the command it runs for a client (docs/contract.md §14)


def _configured_names(config_path: str) -> tuple[list[str] | None, str | None]:
    """(the server names of the config file, None) for the root help and completion, read offline; (None, None)
    for a missing file and (None, why) for one that cannot be used."""
    import stat

    try:  # a FIFO or device would block or never end: help and completion must never hang
        if not stat.S_ISREG(os.stat(config_path).st_mode) and not stat.S_ISDIR(os.stat(config_path).st_mode):
            return None, "not a regular file"
    except (OSError, ValueError):
        pass  # missing or unreadable: load_config says which
    try:
        config = load_config(config_path)
    except ConfigNotFoundError:
        return None, None
    except BkmcpError as exc:
        prefix = f"{config_path}: "
        return None, exc.message[len(prefix) :] if exc.message.startswith(prefix) else exc.message
    return sorted(config.servers), None


def _completion_command() -> list[str]:
    """How a completion script runs this bkmcp: the .pyz or bkmcp.py that is running, else ``bkmcp`` on PATH."""
    script = sys.argv[0] if sys.argv else ""
    if script.endswith((".pyz", "bkmcp.py")) and os.path.isfile(script):
        return [sys.executable or "python3", os.path.abspath(script)]
    return ["bkmcp"]


def resolve_completion_server(server: ServerConfig, envr: Environment, *, named: bool) -> ResolvedServer | None:
    """The server a Tab may connect to for its tool names (docs/contract.md §2), resolved; None when Tab must start
    nothing. An HTTP server as configured, but from a ``named`` config (``--config`` on the line: it may be anyone's)
    not one whose URL or headers hold a ``${…}`` reference (a Tab would send the user's environment to it). A stdio
    server only from the user's own config, and never in the shell's working directory: it
    runs in the entry's ``cwd``, else in ``$HOME``; a ``command`` or ``cwd`` that is a relative path (not starting
    at ``/`` or ``~``) is never started, and a bare ``command`` is looked up on the absolute directories of its
    PATH only (a ``.`` or empty entry would name the shell's directory). Relative ``args`` start from that cwd."""
    import dataclasses
    import shutil

    if server.type != "stdio":
        # a named config's ${VAR} would send the user's environment to a URL anyone may have written
        refers = any("${" in text for text in (server.url or "", *(text for pair in server.headers for text in pair)))
        return None if named and refers else resolve_server(server, envr.env, cwd=envr.cwd)
    if named:
        return None

    def anchored(path: str) -> bool:  # names one place whatever the working directory
        resolved = expand_user_path(path, envr.env, "")
        return resolved is not None and os.path.isabs(resolved)

    command = server.command or ""
    workdir = server.cwd or envr.env.get("HOME") or ""
    is_path = os.sep in command or bool(os.altsep and os.altsep in command)
    if not anchored(workdir) or (is_path and not anchored(command)):
        return None
    resolved = resolve_server(server, envr.env, cwd=workdir)
    resolved = dataclasses.replace(resolved, cwd=resolved.cwd or os.path.normpath(workdir))
    if is_path:
        return resolved
    child_path = {**resolved.inherited_env, **resolved.env}.get("PATH", os.defpath)
    found = shutil.which(command, path=os.pathsep.join(d for d in child_path.split(os.pathsep) if os.path.isabs(d)))
    return None if found is None else dataclasses.replace(resolved, command=found)


def _select_server(config: ConfigFile, name: str) -> ServerConfig:
    refusal = config.refusal(name)
    if refusal is not None:
        raise refusal
    if name not in config.servers:
        names = sorted(config.servers)
        close = closest_names(name, names)
        hint = f"did you mean {', '.join(close)}?" if close else "check the server names in the config file"
        raise ServerNotFoundError(
            f"no server {name!r} in {config.path}; configured: {', '.join(names) if names else '(none)'}",
            hint=hint,
            details={"configured": names},
        )
    server = config.servers[name]
    if server.disabled:
        raise InvalidConfigError(
            f'{config.path}: server {name!r} is disabled in this file ("disabled": true)',
            hint='set "disabled" to false or remove it to use this server',
        )
    return server


def _warn_literal_credentials(config: ConfigFile, log: Log) -> None:
    if not config.readable_by_others:
        return
    for server in config.servers.values():
        for name, value in (*server.headers, *server.env):
            if is_secret_name(name) and "${" not in value.replace("$${", ""):
                log.warn(
                    f"{config.path} holds literal credentials and is readable by group/others; run chmod 600 on it",
                    once_key="perms",
                )
                return


def _positive_int(text: str | None, option: str, default: int) -> int:
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or not 0 < int(text) <= 100_000:
        raise UsageError(f"{option} must be a positive integer, got {text!r}")
    return int(text)


def build_resident_options(inv: Invocation) -> ResidentOptions:
    """The ``--resident`` options (docs/contract.md §11), checked: usage errors before anything starts."""
    assert inv.registry is not None
    if not inv.registry:
        raise UsageError("--registry needs a SQLite file path or an http(s):// URL")
    if inv.events == "":
        raise UsageError("--events needs a file path or - (stderr)")
    return ResidentOptions(
        registry=inv.registry,
        events=inv.events,
        max_processes=_positive_int(inv.max_processes, "--max-processes", DEFAULT_MAX_PROCESSES),
        max_user_processes=_positive_int(inv.max_user_processes, "--max-user-processes", DEFAULT_MAX_USER_PROCESSES),
        idle_timeout=parse_duration(inv.idle_timeout, option="--idle-timeout")
        if inv.idle_timeout is not None
        else DEFAULT_IDLE_TIMEOUT,
        timeout=inv.timeout_seconds,
        insecure=inv.insecure,
        shutdown_grace=_shutdown_grace(inv.shutdown_grace),
        inject_resource_tools=inv.inject_resource_tools,
        max_blob_bytes=_byte_count(inv.max_blob_bytes, "--max-blob-bytes", MAX_BLOB_BYTES),
        elicitation=_elicitation_mode(inv.elicitation),
        input_timeout=parse_duration(inv.input_timeout, option="--input-timeout")
        if inv.input_timeout is not None
        else DEFAULT_INPUT_TIMEOUT,
    )


def _elicitation_mode(text: str | None) -> str:
    """``--elicitation off|forward`` (docs/contract.md §11.2 "A server that asks"): off unless the platform says."""
    if text is None:
        return "off"
    if text not in ("off", "forward"):
        raise UsageError(f"--elicitation must be off or forward, got {clip_text(repr(text), 40)}")
    return text


def _byte_count(text: str | None, option: str, default: int) -> int:
    """A positive number of bytes (digits only), or ``default`` when the option is not given."""
    if text is None:
        return default
    if not (text.isascii() and text.isdigit()) or int(text) == 0:
        raise UsageError(f"{option} must be a positive number of bytes, got {text!r}")
    return int(text)


def _shutdown_grace(text: str | None) -> float:
    """``--shutdown-grace``: a duration, or ``0`` for none (the commands in flight are cut at once)."""
    if text is None:
        return DEFAULT_SHUTDOWN_GRACE
    if text.strip() in ("0", "0s", "0ms"):
        return 0.0
    return parse_duration(text, option="--shutdown-grace")


def run_registry_tool(inv: Invocation, envr: Environment, log: Log) -> int:
    """``bkmcp --registry FILE --import mcp.json`` and ``bkmcp --registry FILE --list`` (docs/contract.md §11.3)."""
    assert inv.registry is not None
    scheme, separator, _ = inv.registry.partition("://")
    if separator and scheme.isalpha():
        raise UsageError(
            "--import and --list work on a SQLite registry file, not on a URL",
            hint="manage an HTTP source's servers in the platform that serves it",
        )
    if not inv.registry:
        raise UsageError("--registry needs a SQLite file path")
    path = resolve_user_path(inv.registry, envr.env, envr.cwd, option="--registry")
    importing = inv.registry_import is not None
    if inv.registry_import is not None:
        if not inv.registry_import:
            raise UsageError("--import needs an mcp.json path")
        config = load_config(resolve_user_path(inv.registry_import, envr.env, envr.cwd, option="--import"))
    registry = SqliteRegistry(path, log=log, timeout=inv.timeout_seconds, create=importing)
    try:
        if importing:
            data: dict[str, Any] = {"imported": registry.import_config(config, log), "registry": path}
        else:
            data = {"servers": [render_registry_row(s) for s in registry.view(None).servers.values()]}
    finally:
        registry.close()
    envr.stdout.write(dump_json(build_success(data)) + "\n")
    envr.stdout.flush()
    return EXIT_OK


def _binary_stdin(stream: IO[str]) -> Any:
    """The byte stream under a text stdin (an injected text stream is read as UTF-8)."""
    buffer = getattr(stream, "buffer", None)
    if buffer is not None:
        return buffer
    import io

    return io.BytesIO(stream.read().encode("utf-8", "surrogateescape"))


class _TextSink:
    """Bytes written to an injected text stream (tests run ``main`` in-process)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream

    def write(self, data: bytes) -> None:
        self.stream.write(data.decode("utf-8", "surrogatepass"))

    def flush(self) -> None:
        self.stream.flush()


def _binary_stdout(stream: IO[str]) -> Any:
    buffer = getattr(stream, "buffer", None)
    return buffer if buffer is not None else _TextSink(stream)


class Runner:
    """Executes one invocation. Raises BkmcpError; ``main`` turns it into an envelope and exit status."""

    def __init__(self, inv: Invocation, envr: Environment, log: Log) -> None:
        self.inv = inv
        self.envr = envr
        self.log = log
        self.redactor = log.redactor
        self.remote_started = False
        self.deadline: Deadline | None = None  # the remote operation's budget, once it started
        self.ctx: OpContext | None = None  # the remote operation, once it started
        self.shown_config: str | None = None  # the given --config, resolved: every printed command carries it
        self.server: ResolvedServer  # the resolved server, once run_remote resolved it
        self.writer: BlobWriter | None = None  # --out DIR, open once the command is past its help paths

    def emit_text(self, text: str) -> int:
        self.envr.stdout.write(text if text.endswith("\n") else text + "\n")
        return EXIT_OK

    def emit_envelope(self, envelope: dict[str, Any], jq: JqProgram | None, status: int, *, raw: bool = False) -> int:
        """Write the envelope, or each ``--jq`` value as it comes (flushed, within the budget). A reader that goes
        away ends the output quietly: ``main`` maps the ``BrokenPipeError`` to the exit status. ``raw`` (a success
        under ``--raw``): ``--jq``'s strings unquoted, else the call's result as text (docs/contract.md §7). On a
        terminal, controls in what a server sent are shown as escapes (``render_raw_text``)."""
        out = self.envr.stdout
        terminal = is_terminal(out)
        try:
            if jq is not None:
                try:
                    for line in jq.stream(envelope, self.jq_deadline(), raw=raw):
                        out.write((render_raw_text(line, terminal) if terminal else line) + "\n")
                        out.flush()
                except JqHalt as halt:
                    out.flush()
                    self.envr.stderr.write(halt.message)
                    self.envr.stderr.flush()
                    return halt.status
            else:
                pretty = 2 if terminal else None
                if raw:
                    out.write(render_raw_data(envelope["data"], pretty=terminal, terminal=terminal))
                else:
                    text = dump_json(envelope, indent=pretty)
                    out.write(render_raw_text(text, terminal) if terminal else text)  # then its newline: not copied
                    out.write("\n")
            out.flush()
        except BrokenPipeError:
            if out is sys.__stdout__:  # the interpreter would flush what is left at exit, fail again, exit 120
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, out.fileno())
                os.close(devnull)
            raise
        return status

    def jq_deadline(self) -> Deadline:
        """The budget of ``--jq``: what the operation left of ``--timeout``, at least ``JQ_MIN_BUDGET`` (so a
        timed-out envelope can still be projected); the whole ``--timeout`` when nothing remote ran (dry run)."""
        timeout = self.inv.timeout_seconds
        return Deadline(timeout if self.deadline is None else max(self.deadline.left(), min(timeout, JQ_MIN_BUDGET)))

    def run(self) -> int:
        inv, envr = self.inv, self.envr
        if inv.version:
            return self.emit_text(f"bkmcp {__version__}")
        check_invocation(inv, envr.warm.timeout if envr.warm is not None else None)
        registry_tool = inv.registry_import is not None or inv.registry_list
        if inv.help and (registry_tool or inv.resident):  # a mode's --help prints that mode's help (contract §2)
            return self.emit_text(render_resident_help())
        if registry_tool or inv.resident:
            return self.run_resident_mode(registry_tool)
        config_path = resolve_config_path(inv.config, envr.env, envr.cwd)
        self.shown_config = config_path if inv.config is not None else None
        if inv.completion is not None:
            return self.run_completion(inv.completion, config_path)
        mode = any(on for _name, on in invocation_modes(inv))
        if inv.server is None:
            if inv.sessions and not inv.help:
                return self.run_sessions()
            if inv.help or not mode:
                names, problem = _configured_names(config_path)
                return self.emit_text(render_root_help(config_path, names, problem, given=inv.config is not None))
        seconds = keep_alive_seconds(inv, envr.env, self.log) if envr.warm is None else None
        if seconds is not None and uses_warm_session(inv):  # docs/contract.md §14: the warm process runs it
            status = run_warm_client(inv, envr, self.log, seconds)
            if status is not None:
                return status
        # help (root, server, tool; bare `bkmcp <server>` too) is never projected, so --jq is not even compiled
        projected = inv.jq is not None and not inv.help and mode
        jq = compile_jq(inv.jq) if projected and inv.jq is not None else None
        self.log.debug(f"config file: {config_path}")
        config = load_config(config_path)
        for name, problem in config.invalid_names:
            self.log.warn(f"{config.path}: server {safe_name(name)!r} is ignored: {problem}; rename it to use it")
        _warn_literal_credentials(config, self.log)
        assert inv.server is not None
        for name, message, _hint in config.unusable:
            if name != inv.server:  # one line each; the selected one is the error below
                self.log.warn(f"{message}; this server is left out")
        server_cfg = _select_server(config, inv.server)
        for field_name in server_cfg.ignored:
            self.log.warn(
                f'{config.path}: server {server_cfg.name!r}: field "{field_name}" is ignored '
                f"({EDITOR_IGNORED_FIELDS[field_name]})"
            )
        self.log.debug(f"server: {server_cfg.name} ({server_cfg.type})")
        if inv.read is not None and inv.help:  # offline: the template's variables (docs/contract.md §2)
            return self.emit_text(render_template_help(server_cfg.name, inv.read, self.shown_config))
        if inv.tool is None and inv.prompt is None and (inv.help or not mode):
            return self.emit_text(render_server_help(server_cfg, self.shown_config))
        return self.run_remote(server_cfg, jq)

    def run_completion(self, shell: str, config_path: str) -> int:
        """``--completion SHELL`` prints the script; ``--completion servers`` (what the script runs) prints the
        configured server names, one a line, and nothing at all when the file is missing or invalid."""
        if shell not in (*COMPLETION_SHELLS, "servers"):
            return self.run_completion_words(config_path)
        if shell != "servers":
            return self.emit_text(render_completion(shell, _completion_command()))
        names, _problem = _configured_names(config_path)
        self.envr.stdout.write(render_completion_names(names or ()))
        return EXIT_OK

    def run_completion_words(self, config_path: str) -> int:  # pyz: remote part
        """``--completion tools SERVER`` / ``--completion flags SERVER TOOL`` (what the scripts run): the server's
        tool names, or that tool's flags, one a line. From a live warm session's catalogue (docs/contract.md §14),
        else one connect within ``COMPLETION_TIMEOUT`` whose server is gone when it ends, to a server that
        ``resolve_completion_server`` lets Tab start; nothing at all, exit 0, when neither answers. In the warm
        process (``envr.warm``) only a kept session answers: it opens none."""
        inv, envr = self.inv, self.envr
        assert inv.server is not None
        if inv.completion == "flags" and inv.read is not None:  # a template's variables: read from it, offline
            try:
                envr.stdout.write(render_completion_target_flags(None, inv.read))
            except BkmcpError:
                pass
            return EXIT_OK
        if envr.warm is None:
            answer = ask_warm_completion(inv, envr)
            if answer is not None:
                envr.stdout.write(answer)
                return EXIT_OK
        import io

        silent = Log(io.StringIO())
        try:
            server_cfg = _select_server(load_config(config_path), inv.server)
            if envr.warm is not None:  # a kept session's identity: resolved as the command that started it was
                server: ResolvedServer | None = resolve_server(server_cfg, envr.env, cwd=envr.cwd)
            else:
                server = resolve_completion_server(server_cfg, envr, named=inv.config is not None)
            if server is None:
                return EXIT_OK
            ctx = OpContext(
                Deadline(COMPLETION_TIMEOUT), silent, sessions=envr.warm.sessions if envr.warm is not None else None
            )
            words = self.completion_words(server, ctx)
        except BkmcpError:
            return EXIT_OK if envr.warm is None else EXIT_LOCAL  # the warm client then connects itself
        envr.stdout.write(words)
        return EXIT_OK

    def completion_words(self, server: ResolvedServer, ctx: OpContext) -> str:  # pyz: remote part
        """The words of one ``--completion tools|flags|prompts|resources|values`` (docs/contract.md §2): the
        tools or a tool's flags; the prompt names, the resource URIs and templates, a prompt's arguments (as
        flags); the values ``completion/complete`` offers for the last ``--ARG PARTIAL`` of a prompt or template,
        the flags before it as ``context.arguments``. A template's flags are its variables, read from it."""
        inv = self.inv
        kind, insecure = inv.completion, inv.insecure
        if kind == "prompts":
            return render_completion_names(
                p.get("name") for p in run_prompts(server, ctx, insecure=insecure)["prompts"]
            )
        if kind == "resources":
            found = run_resources(server, ctx, insecure=insecure)
            uris = [r.get("uri") for r in found["resources"]] + [t.get("uriTemplate") for t in found["templates"]]
            return render_completion_quoted(uris)
        if kind == "flags" and inv.prompt is not None:
            definition = run_prompt(server, ctx, inv.prompt, insecure=insecure, prepare=lambda _prompt: None)
            return render_completion_target_flags(definition["definition"], None)
        if kind == "values":
            *given, typed = inv.tool_tokens
            context = {t.name: t.value for t in given if t.value is not None}
            ref = (
                {"type": "ref/prompt", "name": inv.prompt}
                if inv.prompt is not None
                else {"type": "ref/resource", "uri": inv.read or ""}
            )
            argument = (typed.name, typed.value or "")

            def work(session: McpSession) -> dict[str, Any]:
                return complete_argument(session, ctx, ref, argument, context)

            completion = run_on_session(server, ctx, work, insecure=insecure)
            return render_completion_quoted(completion["values"])
        return render_completion_words(run_tools(server, ctx, insecure=insecure)["tools"], inv.tool)

    def run_sessions(self) -> int:  # pyz: remote part
        """``--sessions [--stop]``: printed like every envelope (``--jq``, ``-r`` with it, pretty on a terminal)."""
        inv = self.inv
        jq = compile_jq(inv.jq) if inv.jq is not None else None
        return self.emit_envelope(build_success(sessions_data(inv, self.envr)), jq, EXIT_OK, raw=inv.raw)

    def run_resident_mode(self, registry_tool: bool) -> int:  # pyz: remote part
        """``--registry FILE --import/--list`` (``registry_tool``), or ``--resident`` (docs/contract.md §11)."""
        inv, envr = self.inv, self.envr
        if registry_tool:
            return run_registry_tool(inv, envr, self.log)
        return run_resident(
            build_resident_options(inv),
            stdin=_binary_stdin(envr.stdin),
            stdout=_binary_stdout(envr.stdout),
            log=self.log,
            env=envr.env,
            stderr=envr.stderr,
            cwd=envr.cwd,
        )

    def run_remote(self, server_cfg: ServerConfig, jq: JqProgram | None) -> int:  # pyz: remote part
        """Everything past the help paths: resolve the server, then dry-run, check, tools or a tool call. The
        help paths above stay free of the session engine (the pyz loads its sections on first use, see
        docs/building.md)."""
        inv, envr = self.inv, self.envr
        server = resolve_server(server_cfg, envr.env, cwd=envr.cwd)
        self.redactor.learn(server.redactor)
        warm = envr.warm  # run for a warm client: its Ctrl-C, the kept sessions (docs/contract.md §14)
        # reading --body from a FIFO or pipe counts against the budget too
        deadline = Deadline(inv.timeout_seconds, interrupt=warm.interrupt if warm is not None else None)
        if inv.dry_run:
            assert inv.tool is not None and inv.body is not None
            preview = read_body(inv.body, envr.stdin, envr.cwd, deadline, env=envr.env)
            return self.emit_envelope(build_success(build_dry_run(server, inv.tool, preview)), jq, EXIT_OK, raw=inv.raw)
        arguments: dict[str, Any] | None = None
        if inv.tool is not None and not inv.help and inv.body is not None:
            arguments = read_body(inv.body, envr.stdin, envr.cwd, deadline, env=envr.env)
        log = self.log
        progress = (lambda token: ProgressLine(log, token)) if log.verbose or log.is_tty else None
        ctx = OpContext(
            deadline,
            log,
            progress=progress,
            refresh=inv.tools or inv.check or inv.resources or inv.prompts,
            sessions=warm.sessions if warm is not None else None,
            on_request=warm.on_request if warm is not None else None,
            input=self.input_source(server, deadline) if not inv.help else None,
        )
        self.deadline, self.ctx = deadline, ctx
        if inv.out not in (None, "-") and not inv.help:  # an unusable directory fails before anything is sent
            assert inv.out is not None
            self.writer = BlobWriter(resolve_user_path(inv.out, envr.env, envr.cwd, option="--out"))
        self.server = server
        task_ids = (inv.task_status, inv.task_result, inv.task_cancel)
        if server.type == "stdio" and warm is None and (inv.detach or any(t is not None for t in task_ids)):
            raise UsageError(
                f"server {server.name!r} runs over stdio: its tasks live in its process, which a one-shot command "
                "stops when it ends, so " + ("--detach" if inv.detach else "a task id") + " could never be used "
                "again",
                hint="add --keep-alive: the background process keeps the server (and its tasks) until it idles out",
            )
        try:
            self.remote_started = True
            if inv.tasks or any(t is not None for t in task_ids):
                return run_task_mode(self, server, jq, ctx)
            if inv.resume is not None:
                return self.run_resume(server, jq, ctx)
            if inv.read is not None or inv.prompt is not None:
                return self.run_read_or_prompt(server, jq, ctx)
            if inv.skill is not None:  # no further word: MODE_TABLE refused any
                return self.emit_result(run_skill(server, ctx, inv.skill, insecure=inv.insecure), jq)
            if not (inv.check or inv.tools or inv.resources or inv.prompts or inv.skills):
                assert inv.tool is not None
                return self.run_tool(server, inv.tool, arguments, jq, ctx)
            if inv.resources:
                data = run_resources(server, ctx, insecure=inv.insecure)
                if inv.brief:
                    data["resources"] = [describe_resource_brief(r) for r in data["resources"]]
                    data["templates"] = [describe_resource_brief(t) for t in data["templates"]]
            elif inv.prompts:
                data = run_prompts(server, ctx, insecure=inv.insecure)
            elif inv.skills:
                data = run_skills(server, ctx, insecure=inv.insecure)
            elif inv.check:
                data = run_check(server, ctx, insecure=inv.insecure)
            elif inv.brief:  # compact discovery (contract §7): no schemas, one line of text per tool
                data = run_tools(server, ctx, insecure=inv.insecure)
                data["tools"] = [describe_brief(t) for t in data["tools"] if isinstance(t, dict)]
                if inv.raw and jq is None:  # a person's list: one line per tool
                    return self.emit_text(render_brief_lines(data["tools"]) or "(no tools)")
            else:  # tools stay exactly as received; how each maps to flags (and what needs --body) sits beside them
                data = run_tools(server, ctx, insecure=inv.insecure)
                data["cli"] = {str(t.get("name")): describe_cli(t) for t in data["tools"] if isinstance(t, dict)}
            return self.emit_envelope(build_success(data), jq, EXIT_OK, raw=inv.raw)
        except RemoteError as exc:
            if isinstance(exc, JqError):
                raise
            # --jq projects successes only: a failure is printed whole, never hidden (docs/contract.md §7)
            error = word_task_error(self, word_for_cli(exc, server.name, self.shown_config))
            return self.emit_envelope(build_failure(error, self.redactor), None, error.exit_status)
        except BkmcpError as exc:
            raise word_for_cli(exc, server.name, self.shown_config) from None
        finally:
            if self.writer is not None:
                self.writer.close()

    def emit_result(self, data: dict[str, Any], jq: JqProgram | None) -> int:
        """A successful result's envelope; with ``--out`` its blobs written first, each replaced by ``{path, bytes,
        sha256, mimeType}``, or with ``--out -`` the one blob's bytes on stdout instead of the envelope
        (docs/contract.md §7 "Blobs to files")."""
        inv = self.inv
        if inv.out is not None and "files" in data:  # --skill NAME --out DIR: a verified copy (save_skill)
            if inv.out == "-":
                raise OutNeedsOneBlobError(
                    "--out - writes one blob to stdout; a skill is a directory of files: nothing was written",
                    hint="use --out DIR for a copy of the skill",
                    details={"blobs": len(data["files"])},
                )
            assert self.writer is not None
            save_skill(data, self.writer, inv.blob_limit)
        elif inv.out is not None:
            spots = find_blobs(data)
            if inv.out == "-":
                if len(spots) != 1:
                    raise OutNeedsOneBlobError(
                        f"--out - writes one blob to stdout, and the result has {len(spots)}: nothing was written",
                        hint="use --out DIR to write every blob to a file",
                        details={"blobs": len(spots)},
                    )
                payload = decode_blobs(spots, inv.blob_limit, data)[0]
                sink = _binary_stdout(self.envr.stdout)
                sink.write(payload)
                sink.flush()
                return EXIT_OK
            assert self.writer is not None
            save_blobs(spots, decode_blobs(spots, inv.blob_limit, data), self.writer)
        return self.emit_envelope(build_success(data), jq, EXIT_OK, raw=inv.raw)

    def emit_call(self, data: dict[str, Any], jq: JqProgram | None) -> int:
        """A call's data (or a task's result) printed; ``isError: true`` is ``mcp_tool_error``."""
        if data["result"].get("isError") is True:
            name = data.get("tool")
            reason = render_tool_reason(data["result"], self.redactor.scrub)
            raise ToolError(
                f"tool {name!r} failed: {reason}" if reason else f"tool {name!r} reported an error (isError: true)",
                hint="the tool ran and returned an error result; see data.result",
                data=data,
            )
        return self.emit_result(data, jq)

    def input_source(self, server: ResolvedServer, deadline: Deadline) -> CommandLineInput | None:  # pyz: remote part
        """Who answers the server's questions in this command (docs/contract.md §5): the answers on the command line,
        else a person when stdin and stderr are a terminal; a 2026-07-28 round nobody answered is kept for
        ``--resume``. Listings and --check ask nothing: no source."""
        inv, envr = self.inv, self.envr
        if inv.tool is None and inv.prompt is None and inv.read is None and inv.resume is None:
            return None
        inputs = None
        if inv.inputs is not None:
            inputs = read_body(inv.inputs, envr.stdin, envr.cwd, deadline, env=envr.env, option="--inputs")
        answers = bool(inv.input) or inputs is not None or inv.input_action is not None
        terminal = None
        if not answers and envr.warm is None and is_terminal(envr.stdin) and is_terminal(envr.stderr):
            terminal = TerminalQuestions(envr.stdin, envr.stderr)

        def keep(method: str, params: Mapping[str, Any], pending: InputRound, era: str | None) -> dict[str, Any]:
            return save_resume(envr.env, server, method, params, pending, self.log)

        return CommandLineInput(
            inv.input, inputs, inv.input_action, terminal, keep=keep, resuming=inv.resume is not None
        )

    def run_resume(self, server: ResolvedServer, jq: JqProgram | None, ctx: OpContext) -> int:  # pyz: remote part
        """``bkmcp <server> --resume ID --input …``: the request an earlier command left asking (its kept round,
        ``save_resume``) sent again with a new JSON-RPC id, the answers and the ``requestState`` echoed exactly
        (docs/contract.md §5). The handle is used once: it is removed when the server has answered."""
        inv = self.inv
        assert inv.resume is not None
        record = load_resume(self.envr.env, inv.resume, server.name)
        pending = InputRound(record["input_requests"], record.get("request_state"))
        method, params = record["method"], record["params"]
        try:
            if method == "tools/call":
                name, arguments = params["name"], params.get("arguments") or {}
                data = run_call(
                    server, ctx, name, insecure=inv.insecure, prepare=lambda _tool: arguments, pending=pending
                )
            elif method == "prompts/get":
                name, arguments = params["name"], params.get("arguments") or {}
                data = run_prompt(
                    server, ctx, name, insecure=inv.insecure, prepare=lambda _prompt: arguments, pending=pending
                )
            else:
                data = run_read(server, ctx, params["uri"], insecure=inv.insecure, pending=pending)
        except RemoteError as exc:
            if request_was_sent(exc) or isinstance(exc, InputRequiredError):
                forget_resume(self.envr.env, inv.resume)
            raise
        forget_resume(self.envr.env, inv.resume)
        result = data["result"]
        if method == "tools/call" and result.get("isError") is True:
            reason = render_tool_reason(result, self.redactor.scrub)
            raise ToolError(
                f"tool {data['tool']!r} failed: {reason}" if reason else f"tool {data['tool']!r} reported an error",
                hint="the tool ran and returned an error result; see data.result",
                data=data,
            )
        return self.emit_envelope(build_success(data), jq, EXIT_OK, raw=inv.raw)

    def cancelled(self) -> CancelledError | None:  # pyz: remote part
        """What a Ctrl-C must tell once a request was sent (docs/contract.md §7): whether ``tools/call`` had been
        sent (the outcome is then unknown) and the stage it stopped in. None before any request: a plain 130. While
        a task is waited for: the task goes on (never cancelled), with the commands that go on with it."""
        ctx = self.ctx
        if ctx is None or ctx.last_request is None:
            return None
        task = ctx.task
        if task is not None and task.get("status") not in TASK_TERMINAL:
            lives = task_lives_on(self)
            commands = task_commands(self, task["mcp_task_id"]) if lives else None
            return CancelledError(
                f"interrupted (Ctrl-C) while waiting for task {task['mcp_task_id']!r}: "
                + (
                    "bkmcp detached; the task goes on (not cancelled)"
                    if lives
                    else "the task ends with the stdio server's process (one-shot)"
                ),
                hint=(
                    f"wait for it: {commands['result']}; cancel it: {commands['cancel']}"
                    if commands
                    else "a stdio server's task lives in its process; add --keep-alive to keep it"
                ),
                details={"outcome": "task_running" if lives else "unknown", "stage": "task"},
                data={
                    "server": self.inv.server,
                    "tool": task.get("tool"),
                    "task": task,
                    **({"commands": commands} if commands else {}),
                },
            )
        stage = stage_of(ctx.last_request)
        data = {"server": self.inv.server, **({"tool": self.inv.tool} if self.inv.tool is not None else {})}
        if ctx.call_sent:
            return CancelledError(
                f"interrupted (Ctrl-C) in the {stage} stage, after tools/call was sent: the call may or may not "
                "have run",
                hint="check whether the tool ran before calling it again; do not retry it blindly (bkmcp never "
                "resends a call)",
                details={"outcome": "unknown", "stage": stage},
                data=data,
            )
        return CancelledError(
            f"interrupted (Ctrl-C) in the {stage} stage" + (", before tools/call was sent" if self.inv.tool else ""),
            hint="nothing was called; the command can be run again",
            details={"outcome": "not_sent", "stage": stage},
            data=data,
        )

    def run_read_or_prompt(self, server: ResolvedServer, jq: JqProgram | None, ctx: OpContext) -> int:
        """``--read URI`` (a template's variables expanded here, before anything is sent) or ``--prompt NAME``
        (its arguments checked against the listed prompt before ``prompts/get``; ``--help``: its arguments)."""
        inv = self.inv
        if inv.positional:
            raise UsageError(
                f"unexpected argument {inv.positional[0][0]!r}", hint="variables and arguments are flags (--name VALUE)"
            )
        if inv.read is not None:
            uri = inv.read
            if is_uri_template(uri) or inv.tool_tokens:
                uri = expand_uri_template(uri, parse_template_values(uri, inv.tool_tokens))
            data = run_read(server, ctx, uri, insecure=inv.insecure)
        else:
            assert inv.prompt is not None

            def prepare(prompt: dict[str, Any]) -> dict[str, str] | None:
                return None if inv.help else parse_prompt_arguments(prompt, inv.tool_tokens, server_name=server.name)

            data = run_prompt(server, ctx, inv.prompt, insecure=inv.insecure, prepare=prepare)
            if "definition" in data:
                return self.emit_text(render_prompt_help(server.name, data["definition"], self.shown_config))
        return self.emit_result(data, jq)

    def run_tool(
        self,
        server: ResolvedServer,
        name: str,
        arguments: dict[str, Any] | None,
        jq: JqProgram | None,
        ctx: OpContext,
    ) -> int:
        inv = self.inv

        def prepare(tool: dict[str, Any]) -> dict[str, Any] | None:
            if inv.help:
                return None
            if inv.positional:
                value, follows = inv.positional[0]
                raise build_positional_error(tool, value, follows, server_name=server.name, config=self.shown_config)
            given: list[str] = []
            if arguments is None:
                chosen = parse_tool_arguments(tool, inv.tool_tokens, server_name=server.name, config=self.shown_config)
                given = list(chosen)
            else:
                chosen = arguments
                ignored = check_tool_tokens(tool, inv.tool_tokens, server_name=server.name, config=self.shown_config)
                if ignored:
                    self.log.warn(f"--body is the complete arguments object; not sent: {', '.join(ignored)}")
            self.log.debug(validate_arguments(tool, chosen, deadline=ctx.deadline, flags=given).describe())
            return chosen

        choice = TaskChoice(
            wanted=inv.task or inv.detach,
            detach=inv.detach,
            on_handle=lambda handle, held: save_task(self, handle, held),
        )
        data = run_call(server, ctx, name, insecure=inv.insecure, prepare=prepare, task=choice)
        if "schema" in data:
            return self.emit_text(render_tool_help(server.name, data["schema"], self.shown_config))
        if "result" not in data:  # --detach: the task's handle and the commands that go on with it
            data["commands"] = task_commands(self, data["task"]["mcp_task_id"])
            return self.emit_envelope(build_success(data), jq, EXIT_OK, raw=False)
        return self.emit_call(data, jq)


# A kept input round (``--resume``, docs/contract.md §5): one 0600 file per handle in a 0700 folder of the user's state
# directory, holding the server's name, the method and its params (the arguments the retry must send again), the
# questions and the requestState; never a header, an environment value or anything of the config. It expires.
RESUME_TTL = 3600.0  # seconds a kept round can be answered
_RESUME_ID = lazy_re(r"[A-Za-z0-9_-]{16,64}")


def resume_dir(env: Mapping[str, str]) -> str:
    """``$XDG_STATE_HOME/bkmcp/resume``, else ``~/.local/state/bkmcp/resume`` (XDG base directories)."""
    state = env.get("XDG_STATE_HOME", "")
    if not os.path.isabs(state):
        state = os.path.join(env.get("HOME") or os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, "bkmcp", "resume")


def _private_folder(path: str) -> str:
    """``path`` made (0700, its parents as the umask says) and checked: a directory of this user's, mode 0700."""
    import stat

    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise UsageError(
            f"{path} is not a private directory of yours (mode 0700); bkmcp keeps resume handles there",
            hint=f"chmod 700 {path} (or remove it)",
        )
    return path


def save_resume(
    env: Mapping[str, str],
    server: ResolvedServer,
    method: str,
    params: Mapping[str, Any],
    pending: InputRound,
    log: Log,
) -> dict[str, Any]:
    """Keep ``pending`` for ``--resume``: ``{"resume": ID, "expires_in_s": …}`` for ``data``; {} (and a warning)
    when it cannot be kept (the questions are still reported)."""
    import secrets

    handle = secrets.token_urlsafe(18)
    record = {
        "bkmcp_resume": 1,
        "server": server.name,
        "method": method,
        "params": {key: value for key, value in params.items() if key != "_meta"},  # no progress token
        "input_requests": pending.requests,
        "expires_at": int(time.time() + RESUME_TTL),
    }
    if pending.state is not None:
        record["request_state"] = pending.state
    try:
        folder = _private_folder(resume_dir(env))
        fd = os.open(
            os.path.join(folder, handle + ".json"), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
        )
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(dump_json(record))
    except (OSError, BkmcpError) as exc:
        log.warn(f"the question could not be kept for --resume: {getattr(exc, 'message', None) or exc}")
        return {}
    return {"resume": handle, "expires_in_s": int(RESUME_TTL)}


def load_resume(env: Mapping[str, str], handle: str, server_name: str) -> dict[str, Any]:
    """The round kept under ``handle`` for ``server_name``; ``usage_error`` when it is unknown, expired (then it is
    removed), damaged or another server's."""
    unknown = UsageError(
        f"--resume {short_text(handle)}: no such handle (unknown, used, or expired after {int(RESUME_TTL)} s)",
        hint="run the original command again; it reports a new handle in data.resume",
    )
    if not _RESUME_ID.fullmatch(handle):
        raise unknown
    path = os.path.join(resume_dir(env), handle + ".json")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as source:
            record = parse_json(source.read(BODY_LIMIT))
    except (OSError, JsonInputError):
        raise unknown from None
    fields_ok = (
        isinstance(record, dict) and record.get("method") in INPUT_METHODS and isinstance(record.get("params"), dict)
    )
    if not fields_ok or not isinstance(record.get("input_requests"), dict):
        raise unknown
    expires = record.get("expires_at")
    if isinstance(expires, bool) or not isinstance(expires, int) or expires < time.time():
        forget_resume(env, handle)
        raise unknown
    if record.get("server") != server_name:
        raise UsageError(
            f"--resume {short_text(handle)} was made for server {short_text(record.get('server'))!r}, not "
            f"{short_text(server_name)!r}",
            hint=f"bkmcp {short_text(record.get('server'))} --resume {short_text(handle)} --input …",
        )
    return record


def forget_resume(env: Mapping[str, str], handle: str) -> None:
    if _RESUME_ID.fullmatch(handle):
        try:
            os.unlink(os.path.join(resume_dir(env), handle + ".json"))
        except OSError:
            pass


# -- 11.3.1 tasks on the command line: the commands a handle names, the store, the task-id modes -----------------------
# docs/contract.md §5 "Tasks": the Runner's part of tasks (the flows are section 7's, 7.3.1).


def task_commands(runner: Runner, task_id: str) -> dict[str, str]:  # pyz: remote part
    """The commands that show, wait for and cancel a task (a stdio server's: through --keep-alive)."""
    base = build_server_command(runner.server.name, runner.shown_config)
    tail = " --keep-alive" if runner.server.type == "stdio" else ""
    quoted = shell_quote(task_id)
    return {
        "status": f"{base} --task-status {quoted}{tail}",
        "result": f"{base} --task-result {quoted} --wait{tail}",
        "cancel": f"{base} --task-cancel {quoted}{tail}",
    }


def task_lives_on(runner: Runner) -> bool:  # pyz: remote part
    """Whether a task outlives this command: not a one-shot stdio server's (its process ends with it)."""
    return not (runner.server.type == "stdio" and runner.envr.warm is None)


def word_task_error(runner: Runner, error: BkmcpError) -> BkmcpError:  # pyz: remote part
    """An error about a task still alive (the wait ran out, it asks for input) names the commands that go on
    with it; a one-shot stdio server's says the task ended with the server's process."""
    task = (error.data or {}).get("task") if isinstance(error.data, dict) else None
    if (
        not isinstance(task, dict)
        or task.get("status") in TASK_TERMINAL
        or error.details.get("outcome")
        not in (
            "task_running",
            "task_waiting",
        )
    ):
        return error
    if not task_lives_on(runner):
        hint = "a stdio server's task lives in its process, which ended with this command; add --keep-alive"
        return error.copy(hint=hint)
    commands = task_commands(runner, task["mcp_task_id"])
    hint = f"wait for it: {commands['result']}; cancel it: {commands['cancel']}"
    return error.copy(hint=hint, data={**(error.data or {}), "commands": commands})


def save_task(runner: Runner, handle: dict[str, Any], session_id: str | None = None) -> None:  # pyz: remote part
    """Keep ``handle`` (and the legacy HTTP session it lives in) in this user's store (``task_store_path``):
    never lost to a Ctrl-C or a timeout; a store that cannot be written is one warning (the command goes on)."""
    path = task_store_path(runner.envr.env)
    if path is None:
        runner.log.warn("task handles are not kept: set HOME or XDG_STATE_HOME", once_key="task-store")
        return
    try:
        update_task_store(path, build_store_change(handle, runner.server.config_file, int(time.time()), session_id))
    except OSError as exc:
        runner.log.warn(f"task handle not kept in {path}: {exc.strerror or exc}", once_key="task-store")


def run_task_mode(
    runner: Runner, server: ResolvedServer, jq: JqProgram | None, ctx: OpContext
) -> int:  # pyz: remote part
    """``--tasks`` (this user's handles of the server, and its ``tasks/list`` where a legacy server offers it),
    ``--task-status ID``, ``--task-result ID [--wait]``, ``--task-cancel ID`` (docs/contract.md §5 "Tasks")."""
    inv = runner.inv
    if inv.positional or inv.tool_tokens:
        raise UsageError("task options take a task id and nothing else", hint="bkmcp <server> --task-status ID")
    path = task_store_path(runner.envr.env)
    try:
        entries = update_task_store(path, lambda e: e, create=False) if path is not None else []
    except OSError:
        entries = []
    stored = [e for e in entries if e.get("server") == server.name and e.get("config_file") == server.config_file]
    hidden = ("config_file", "saved_at", "expires_at", "session_id")  # the store's own, not the handle's
    mine = [{k: v for k, v in e.items() if k not in hidden} for e in stored]
    if inv.tasks:
        listed = None
        if task_lives_on(runner):

            def listing(session: McpSession) -> dict[str, Any]:
                return {"tasks": list_server_tasks(session, ctx)}

            listed = run_on_session(server, ctx, listing, insecure=inv.insecure)["tasks"]
        data: dict[str, Any] = {"server": server.name, "tasks": mine, "server_tasks": listed}
        return runner.emit_envelope(build_success(data), jq, EXIT_OK, raw=inv.raw)
    action, task_id = next(
        (a, t)
        for a, t in (("status", inv.task_status), ("result", inv.task_result), ("cancel", inv.task_cancel))
        if t is not None
    )
    known = next((e for e in mine if e.get("mcp_task_id") == task_id), None)
    # one-shot: a legacy HTTP task's own session (a warm one is kept anyway)
    source = ctx.sessions or ResumedSessions(next((e for e in stored if e.get("mcp_task_id") == task_id), None))

    def work(session: McpSession) -> dict[str, Any]:
        return run_task_action(session, ctx, action, task_id, known, wait=inv.wait)

    data = run_on_session(server, ctx, work, insecure=inv.insecure, sessions=source)
    save_task(runner, data["task"])
    if "result" not in data:
        if data["task"].get("status") not in TASK_TERMINAL:
            data["commands"] = task_commands(runner, task_id)
        return runner.emit_envelope(build_success(data), jq, EXIT_OK, raw=inv.raw)
    return runner.emit_call(data, jq)


# -- 11.4 --keep-alive: the client and its background process, WarmServer (docs/contract.md §14) -----------------------
# --keep-alive is one room in two sub-sections: this one and 10.5 (the kept sessions, ``WarmSessions``; deferred in
# the pyz with the engine they belong to, and section 7's ``SessionSource`` is their base class, which the pyz
# allows only inside the deferred sections). The client forwards the command line, environment, cwd and (for
# --body -) stdin over a private Unix socket and prints what comes back; the background process runs ``main`` on it
# with ``WarmRun`` (10.5's sessions, the client's Ctrl-C as an ``Interrupt`` on the operation's ``Deadline``).
# Without --keep-alive / BKMCP_KEEP_ALIVE nothing here runs.

KEEP_ALIVE_DEFAULT = 600.0  # --keep-alive without a value: 10 minutes
_WARM_LOCK, _WARM_LOG = "warm.lock", "warm.log"  # shared by the builds; each has its own socket (below)
_WARM_LOG_LIMIT = 1024 * 1024  # bytes of the background process's log
_WARM_START_WAIT = 30.0  # seconds a new background process gets to listen (a loaded machine: many first calls at once)
WARM_DAEMON = "--keep-alive-daemon"  # argv[1] of the background process (never typed by a user)
_WARM_RELAY_SLACK = 30.0  # beyond the command's --timeout, how long a client waits for the process's next frame


class Interrupt:
    """A Ctrl-C that reaches an operation from outside its thread (a warm client's, docs/contract.md §14).

    ``fire`` marks it and runs the wake-ups the operation's waits registered (``hook``): an answer's event, an HTTP
    response's socket. The operation then raises ``KeyboardInterrupt`` where it checks (``Deadline.remaining``,
    ``McpSession.request``), exactly where a one-shot Ctrl-C lands. Never an asynchronous exception: a session
    shared by many calls is only ever left at a point that expects to be left."""

    def __init__(self) -> None:
        self.fired = False
        self._hooks: dict[int, Callable[[], None]] = {}
        self._next = 0
        self._lock = _thread.allocate_lock()

    def fire(self) -> None:
        with self._lock:
            self.fired = True
            hooks = list(self._hooks.values())
        for wake in hooks:
            try:
                wake()
            except Exception:  # noqa: S110 - a wake-up that fails leaves the deadline to end the wait
                pass

    def hook(self, wake: Callable[[], None]) -> int:
        """Run ``wake`` when the interrupt fires (at once if it has); ``unhook`` with the number returned."""
        with self._lock:
            key = self._next = self._next + 1
            self._hooks[key] = wake
            fired = self.fired
        if fired:
            wake()
        return key

    def unhook(self, key: int) -> None:
        with self._lock:
            self._hooks.pop(key, None)

    def check(self) -> None:
        if self.fired:
            raise KeyboardInterrupt


@dataclass
class WarmRun:
    """What the background process gives the ``main`` it runs for a client: the kept sessions, the client's
    Ctrl-C, and who hears each request as it is sent (the client must know whether ``tools/call`` was)."""

    sessions: Any  # SessionSource (section 7) lending WarmSessions' sessions (section 10.5)
    interrupt: Interrupt
    on_request: Callable[[str], None]
    timeout: float  # the client's --timeout, as it parsed it


def keep_alive_seconds(inv: Invocation, env: Mapping[str, str], log: Log) -> float | None:
    """How long warm sessions idle (``--keep-alive[=DURATION]``, else ``BKMCP_KEEP_ALIVE``), None when off. A bad
    option value is a usage error; a bad environment value, one warning (the command runs one-shot)."""
    if inv.keep_alive == "":
        return KEEP_ALIVE_DEFAULT
    text = inv.keep_alive if inv.keep_alive is not None else env.get("BKMCP_KEEP_ALIVE", "")
    if not text or text.strip().lower() in ("0", "off"):
        return None
    if inv.keep_alive is not None:
        return parse_duration(text, option="--keep-alive")
    try:
        return parse_duration(text, option="BKMCP_KEEP_ALIVE")
    except UsageError as exc:
        log.warn(f"{exc.message}; the command runs one-shot", once_key="keep-alive")
        return None


def uses_warm_session(inv: Invocation) -> bool:
    """``--tools``, tool calls, ``--resources``, ``--read``, ``--prompts`` and ``--prompt`` may; help paths,
    ``--dry-run``, ``--check`` and ``--out`` (its files are written by the command itself) never do
    (docs/contract.md §14)."""
    return (
        inv.server is not None
        and not (inv.help or inv.dry_run or inv.check or inv.out is not None or inv.skills or inv.skill is not None)
        and any(on for _n, on in invocation_modes(inv))
    )


def warm_dir(env: Mapping[str, str], *, create: bool = True) -> tuple[WarmPlace | None, str]:
    """The private folder of the background processes, open: ``$XDG_RUNTIME_DIR/bkmcp``, else
    ``$TMPDIR/bkmcp-<uid>``, made 0700 if missing (unless not ``create``). (None, why) when it is not a directory of
    this user's with mode 0700. The caller closes it."""
    uid = os.getuid()
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime):
        place = os.path.join(runtime, "bkmcp")
    else:
        tmp = env.get("TMPDIR", "")
        place = os.path.join(tmp if os.path.isabs(tmp) else "/tmp", f"bkmcp-{uid}")
    try:
        if create:
            os.mkdir(place, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        return None, f"cannot create {place}: {exc.strerror or exc}"
    return open_private_dir(place)


class WarmPlace:
    """The private folder, held by a descriptor checked after it was opened without following a symlink. Everything
    in it is reached through that descriptor (``dir_fd``; a socket's address through ``/proc/self/fd/N`` where
    there is one), so renaming or swapping the folder's path later reaches nothing of ours (docs/contract.md §14)."""

    def __init__(self, path: str, fd: int) -> None:
        self.path, self.fd = path, fd  # path: only shown, and the background process's argv
        proc = f"/proc/self/fd/{fd}"
        self.base = proc if os.path.isdir(proc) else path  # elsewhere: the path, guarded by the peer check only

    def address(self, name: str) -> str:
        """What ``connect``/``bind`` take for ``name`` in this folder (at most 30 bytes through /proc: no
        AF_UNIX length limit however long the folder's path is)."""
        return f"{self.base}/{name}"

    def open(self, name: str, flags: int) -> int:
        return os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self.fd)

    def close(self) -> None:
        os.close(self.fd)


def open_private_dir(place: str, fd: int | None = None) -> tuple[WarmPlace | None, str]:
    """``place`` opened (or ``fd``, the descriptor a client handed over) when it is a private folder: a directory,
    not a symlink, this user's, mode 0700, as ``fstat`` sees what was opened; else (None, why)."""
    import errno
    import stat

    if fd is None:
        try:
            fd = os.open(place, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR) and os.path.islink(place):
                return None, f"{place} is a symlink; it must be a directory of yours"
            if exc.errno == errno.ENOTDIR:
                return None, f"{place} is not a directory"
            return None, f"cannot open {place}: {exc.strerror or exc}"
    uid = os.getuid()
    try:
        info = os.fstat(fd)
    except OSError as exc:
        return None, f"cannot read {place}: {exc.strerror or exc}"
    problem = ""
    if not stat.S_ISDIR(info.st_mode):
        problem = f"{place} is not a directory"
    elif info.st_uid != uid:
        problem = f"{place} belongs to uid {info.st_uid}, not to you (uid {uid})"
    elif info.st_mode & 0o077:
        problem = f"{place} has mode {stat.S_IMODE(info.st_mode):04o}; it must be 0700"
    if problem:
        os.close(fd)
        return None, problem
    return WarmPlace(place, fd), ""


def warm_artifact() -> str | None:
    """The bkmcp that runs: the .pyz (its ``__main__`` knows the archive) or bkmcp.py; None when neither."""
    archive = getattr(sys.modules.get("__main__"), "_archive", None)
    if isinstance(archive, str) and os.path.isfile(archive):
        return os.path.abspath(archive)
    source = globals().get("__file__")
    if isinstance(source, str) and os.path.basename(source) == "bkmcp.py" and os.path.isfile(source):
        return os.path.abspath(source)
    return None


def warm_build(artifact: str) -> str:
    """Which build a client or background process is: version, interpreter and the artifact's file identity
    (path, size, mtime, inode). Two builds never talk (docs/contract.md §14). Plain text: nothing in it is secret,
    and the client pays no hashlib import for it."""
    info = os.stat(artifact)
    interpreter = f"{__version__}|{sys.executable}|{sys.version.split()[0]}"
    return f"{interpreter}|{artifact}|{info.st_size}|{info.st_mtime_ns}|{info.st_ino}"


def warm_socket_name(build: str) -> str:
    """Each build's own socket in the folder (docs/contract.md §14: builds coexist, never stop each other). A
    checksum names it (zlib: no hashlib import in the client); the build itself travels in every request and is
    checked, so two builds sharing a name still never run a command together."""
    import zlib

    return f"warm-{zlib.crc32(build.encode('utf-8', 'surrogatepass')):08x}.sock"


def peer_uid(sock: Any) -> int | None:
    """The uid of the process at the other end of a connected Unix socket; None where the system does not say."""
    if sys.platform.startswith("linux"):
        cred = sock.getsockopt(1, 17, 12)  # SOL_SOCKET, SO_PEERCRED: struct ucred {pid, uid, gid}
        return int.from_bytes(cred[4:8], sys.byteorder)
    if sys.platform == "darwin" or "bsd" in sys.platform:  # pragma: no cover - not Linux
        cred = sock.getsockopt(0, 1, 128)  # SOL_LOCAL, LOCAL_PEERCRED: struct xucred {cr_version, cr_uid, …}
        return int.from_bytes(cred[4:8], sys.byteorder)
    return None  # pragma: no cover - not Linux


_FRAME_CHUNK = 1 << 18  # characters of output a frame carries at most (a large result is sent in pieces)


def send_frame(sock: Any, kind: bytes, payload: bytes = b"") -> None:
    """One frame: a kind byte, a 4-byte big-endian length, the payload (a large one sent as it is, not copied)."""
    head = kind + len(payload).to_bytes(4, "big")
    if len(payload) <= _FRAME_CHUNK:
        sock.sendall(head + payload)
    else:
        sock.sendall(head)
        sock.sendall(payload)


def _recv_exact(sock: Any, size: int) -> bytes | None:
    chunks, left = [], size
    while left:
        chunk = sock.recv(min(left, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def recv_frame(sock: Any) -> tuple[bytes, bytes] | None:
    """The next frame, or None when the other end closed (or died)."""
    head = _recv_exact(sock, 5)
    if head is None:
        return None
    payload = _recv_exact(sock, int.from_bytes(head[1:], "big"))
    return None if payload is None else (head[:1], payload)


def _warm_try_connect(place: WarmPlace, name: str) -> Any:
    """A socket connected to ``name`` in the folder, None when nothing listens there; OSError when what listens
    is not this user's (checked before a byte is sent)."""
    import _socket  # the C module: the client needs no more of socket.py (and its selectors, enum) than this

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(place.address(name))
        uid = peer_uid(sock)
    except OSError:
        sock.close()
        return None
    if uid != os.getuid():
        sock.close()
        who = "an unknown user" if uid is None else f"uid {uid}"
        raise OSError(f"the process listening on {os.path.join(place.path, name)} is {who}, not you")
    return sock


# The background process's environment: what the interpreter, the pyz's vendored-package cache and finding
# programs need, never a client's token: each command's environment travels in its own request (docs/contract.md §14).
_WARM_PROCESS_ENV = (
    "PATH", "HOME", "TMPDIR", "XDG_CACHE_HOME", "LANG", "LC_ALL", "LC_CTYPE", "MALLOC_ARENA_MAX",
    "PYTHONPATH", "PYTHONHOME", "PYTHONNOUSERSITE", "PYTHONSAFEPATH", "PYTHONUTF8", "PYTHONDONTWRITEBYTECODE",
    "BKMCP_NO_COMPILED_CACHE",
)  # fmt: skip


def build_warm_process_env(env: Mapping[str, str]) -> dict[str, str]:
    return {name: env[name] for name in _WARM_PROCESS_ENV if name in env}


def _warm_spawn(place: WarmPlace, artifact: str) -> None:
    """Start the background process, detached (its own session, reparented at once: never a zombie of ours). It
    gets the folder's descriptor (its argv names the number) and, as its stderr, the size-bounded log."""
    import subprocess

    log = place.open(_WARM_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        if os.fstat(log).st_size > _WARM_LOG_LIMIT:
            os.ftruncate(log, 0)
        argv = [sys.executable, artifact, WARM_DAEMON, place.path, str(place.fd)]
        # sh starts it in the background and exits: the process is then init's child, not ours (and PWD, which sh
        # sets, is the client's directory: not the process's to keep). It gets 0, 1, 2 and the folder and nothing
        # else (``close_fds``): a descriptor the client inherited (a caller's flock, a pipe) is not held for its life.
        shell = ["/bin/sh", "-c", 'unset PWD OLDPWD; exec "$@" </dev/null >/dev/null &', "sh", *argv]
        subprocess.Popen(
            shell,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=build_warm_process_env(os.environ),
            close_fds=True,
            pass_fds=(place.fd,),
            start_new_session=True,
        ).wait()
    finally:
        os.close(log)


def _warm_connect(place: WarmPlace, artifact: str, name: str) -> Any:
    """A connected socket to the background process of this build (``name``), started (under the lock, exactly
    once however many clients race) when none listens. Raises OSError when it cannot start."""
    sock = _warm_try_connect(place, name)
    if sock is not None:
        return sock
    import fcntl

    lock = place.open(_WARM_LOCK, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        sock = _warm_try_connect(place, name)  # another client started it while this one waited
        if sock is not None:
            return sock
        try:
            os.unlink(name, dir_fd=place.fd)  # a socket file left by a process that died
        except FileNotFoundError:
            pass
        _warm_spawn(place, artifact)
        end = time.monotonic() + _WARM_START_WAIT
        while time.monotonic() < end:
            sock = _warm_try_connect(place, name)
            if sock is not None:
                return sock
            time.sleep(0.005)
        raise OSError(f"the background process did not start listening within {_WARM_START_WAIT:.0f} s")
    finally:
        os.close(lock)  # closing the descriptor releases the lock


def _warm_open(place: WarmPlace, artifact: str, build: str, request: dict[str, Any], stdin: bytes | None) -> Any:
    """Connect (starting the process if needed), send the request and see it accepted; OSError when it is not."""
    import json

    sock = _warm_connect(place, artifact, warm_socket_name(build))
    send_frame(sock, b"R", json.dumps({**request, "build": build}).encode("utf-8", "surrogatepass"))
    frame = recv_frame(sock)
    if frame is not None and frame[0] == b"A":  # accepted: it runs the command
        if stdin is not None:
            send_frame(sock, b"I", stdin)
        return sock
    sock.close()
    if frame is not None and frame[0] == b"M":  # two builds whose socket names collide: neither stops the other
        raise OSError("a background process of another build listens on this build's socket")
    raise OSError("the background process closed the connection before accepting the command")


def _warm_request(op: str, inv: Invocation, envr: Environment, **more: Any) -> dict[str, Any]:
    """A command forwarded to the background process (a run or a completion): its argv, environment, cwd and
    ``--timeout`` value (the process never parses --timeout again), plus what ``op`` needs (``more``)."""
    return {"op": op, "argv": inv.argv, "env": dict(envr.env), "cwd": envr.cwd, "timeout": inv.timeout_seconds, **more}


def run_warm_client(inv: Invocation, envr: Environment, log: Log, seconds: float) -> int | None:
    """Run the command in the warm process and print what it printed, exiting as it exited; None (after one
    warning saying why) when the warm process cannot be used: the caller then runs the command one-shot."""
    artifact = warm_artifact()
    place, problem = warm_dir(envr.env) if artifact is not None else (None, "cannot tell which bkmcp file is running")
    if place is None or artifact is None:
        log.warn(f"--keep-alive: {problem}; the command runs one-shot")
        return None
    timeout = inv.timeout_seconds
    stdin: bytes | None = None
    try:
        if inv.body == "-":  # read here (bounded as one-shot reads it); the process gets the bytes
            stdin = read_body_stream(envr.stdin, "--body", Deadline(timeout))
        request = _warm_request(
            "run",
            inv,
            envr,
            stdin=stdin is not None,
            stdout_tty=is_terminal(envr.stdout),
            stderr_tty=is_terminal(envr.stderr),
            keep_alive=seconds,
        )
        sock = _warm_open(place, artifact, warm_build(artifact), request, stdin)
    except OSError as exc:
        log.warn(f"--keep-alive: the background bkmcp could not be used ({exc}); the command runs one-shot")
        if stdin is not None:
            import io

            envr.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape")
        return None
    finally:
        place.close()
    sock.settimeout(timeout + _WARM_RELAY_SLACK)  # the command ends within its --timeout: a silent process is stuck
    return _warm_relay(sock, inv, envr, log)


def ask_warm_completion(inv: Invocation, envr: Environment) -> str | None:
    """What this build's background process, when one runs, prints for a ``--completion tools|flags|…`` command from
    a session it keeps (docs/contract.md §2); None when none runs, it keeps no live session of the server, or it
    does not answer within ``COMPLETION_TIMEOUT``. Never starts a process."""
    import json

    artifact = warm_artifact()
    place = warm_dir(envr.env, create=False)[0] if artifact is not None else None  # a missing folder: none runs
    if place is None or artifact is None:
        return None
    try:
        build = warm_build(artifact)
        sock = _warm_try_connect(place, warm_socket_name(build))
    except OSError:
        return None
    finally:
        place.close()
    if sock is None:
        return None
    out: list[str] = []
    try:
        sock.settimeout(COMPLETION_TIMEOUT)
        request = _warm_request("complete", inv, envr, build=build)
        send_frame(sock, b"R", json.dumps(request).encode("utf-8", "surrogatepass"))
        while (frame := recv_frame(sock)) is not None:
            if frame[0] == b"O":
                out.append(frame[1].decode("utf-8", "surrogatepass"))
            elif frame[0] == b"X":
                return "".join(out) if json.loads(frame[1])["status"] == EXIT_OK else None
    except (OSError, ValueError, KeyError):
        pass
    finally:
        sock.close()
    return None


def _warm_relay(sock: Any, inv: Invocation, envr: Environment, log: Log) -> int:
    """Print the process's frames as they come; Ctrl-C is forwarded once (the call is cancelled on the wire
    there), a second one leaves at once. A process that dies mid-command: ``mcp_connection_error``, never a retry;
    one that is alive but sends nothing past the command's --timeout (busy): ``mcp_timeout``, its command cancelled."""
    import json

    stage: str | None = None
    call_sent = interrupted = silent = False
    waited = sock.gettimeout() or 0.0  # how long a silence lasts before it counts
    try:
        while True:
            try:
                frame = recv_frame(sock)
            except KeyboardInterrupt:
                if interrupted:
                    log.warn("interrupted")
                    return EXIT_INTERRUPTED
                interrupted = True
                try:
                    send_frame(sock, b"C")
                except OSError:
                    pass
                continue
            except TimeoutError:  # the socket is open, so the process lives: it is busy, not ended
                silent = True
                frame = None
            except OSError:
                frame = None
            if frame is None:
                break
            kind, payload = frame
            if kind == b"O":
                envr.stdout.write(payload.decode("utf-8", "surrogatepass"))
                envr.stdout.flush()
            elif kind == b"E":
                envr.stderr.write(payload.decode("utf-8", "surrogatepass"))
                envr.stderr.flush()
            elif kind == b"S":  # the stage of the request being sent (docs/contract.md §7)
                stage = payload.decode("utf-8", "replace")
                call_sent = call_sent or stage == "call"
            elif kind == b"X":
                return int(json.loads(payload)["status"])
        if silent:
            try:
                send_frame(sock, b"C")  # cancel the command there, as a Ctrl-C would
            except OSError:
                pass
    finally:
        sock.close()
    details: dict[str, Any] = {"outcome": "unknown" if call_sent else "not_sent"}
    if stage:
        details["stage"] = stage
    data = {"server": inv.server} if inv.tool is None else {"server": inv.server, "tool": inv.tool}
    if silent:
        error: BkmcpError = McpTimeoutError(
            "the background bkmcp process (--keep-alive) is still running but sent nothing for "
            f"{format_duration(waited)}, past the command's --timeout"
            + (": tools/call had been sent, so the call may or may not have run" if call_sent else ""),
            hint="check whether the tool ran before calling it again (bkmcp never resends a call); "
            "bkmcp --sessions --stop ends a process that stays busy"
            if call_sent
            else "run the command again; bkmcp --sessions --stop ends a process that stays busy",
            details=details,
            data=data,
        )
        return report_error(error, envr, log)
    error = ConnectionFailedError(
        "the background bkmcp process (--keep-alive) ended during the command"
        + (": tools/call had been sent, so the call may or may not have run" if call_sent else ""),
        hint="check whether the tool ran before calling it again (bkmcp never resends a call); the next command "
        "starts a new background process"
        if call_sent
        else "run the command again: the next one starts a new background process",
        details=details,
        data={"server": inv.server} if inv.tool is None else {"server": inv.server, "tool": inv.tool},
    )
    return report_error(error, envr, log)


def sessions_data(inv: Invocation, envr: Environment) -> dict[str, Any]:
    """The data of ``bkmcp --sessions`` (the warm sessions, never a secret) and ``bkmcp --sessions --stop``: this
    build's process at the top, the other builds' in ``other_builds``; ``--stop`` stops them all. Never starts one."""
    place, problem = warm_dir(envr.env)
    data: dict[str, Any] = {"running": False, "sessions": []}
    if inv.stop:
        data["stopped"] = False
    others: list[dict[str, Any]] = []
    if place is None:
        data["problem"] = problem
    else:
        try:
            artifact = warm_artifact()
            own = warm_socket_name(warm_build(artifact)) if artifact is not None else None
            names = sorted(n for n in os.listdir(place.fd) if n.startswith("warm-") and n.endswith(".sock"))
            for name in names:
                answer = _warm_ask(place, name, "stop" if inv.stop else "list")
                if answer is None:  # nothing listens: a socket file left by a process that died
                    continue
                if name == own:
                    data = answer
                else:
                    others.append(answer)
        finally:
            place.close()
    data["other_builds"] = others
    return data


def _warm_ask(place: WarmPlace, name: str, op: str) -> dict[str, Any] | None:
    """The answer of the process on socket ``name`` to ``op`` (list, stop); None when nothing listens there."""
    import json

    try:
        sock = _warm_try_connect(place, name)
    except OSError as exc:
        raise ConnectionFailedError(
            str(exc), hint="something not yours listens in your private folder: remove it"
        ) from None
    if sock is None:
        return None
    try:
        send_frame(sock, b"R", json.dumps({"op": op}).encode("utf-8"))
        frame = recv_frame(sock)
    except OSError:
        frame = None
    finally:
        sock.close()
    if frame is None or frame[0] != b"L":
        raise ConnectionFailedError(
            "the background bkmcp process did not answer", hint="it may be ending; run bkmcp --sessions again"
        )
    answer: dict[str, Any] = json.loads(frame[1])
    return answer


class _FrameStream:
    """A text stream of ``main``'s that sends what it is given to the client as frames of ``kind``."""

    def __init__(self, conn: Any, kind: bytes, tty: bool, lock: Any) -> None:
        self.conn, self.kind, self.tty, self.lock = conn, kind, tty, lock

    def write(self, text: str) -> int:
        """``text`` in frames of at most ``_FRAME_CHUNK`` characters, each encoded on its own: the same bytes as
        the whole (every character is encoded alone), without a second copy of a large result held at once."""
        with self.lock:
            for start in range(0, len(text), _FRAME_CHUNK):
                send_frame(self.conn, self.kind, text[start : start + _FRAME_CHUNK].encode("utf-8", "surrogatepass"))
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return self.tty


class _BoundedText:
    """The background process's log: at most ``_WARM_LOG_LIMIT`` bytes a run, then nothing more."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream, self.left = stream, _WARM_LOG_LIMIT

    def write(self, text: str) -> int:
        if self.left > 0:
            self.left -= len(text)
            try:
                self.stream.write(text[: max(self.left + len(text), 0)])
                self.stream.flush()
            except (OSError, ValueError):
                self.left = 0
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


class RefusalNotes:
    """The lines a background process writes about refused other-uid connections: at most one per uid every
    ``every`` seconds, the next one saying how many were refused meanwhile (a flood would fill warm.log)."""

    def __init__(self, every: float = 60.0) -> None:
        self.every = every
        self._seen: dict[int | None, list[float]] = {}  # uid (None: unknown) -> [its last line, refusals since]

    def line(self, uid: int | None, now: float) -> str | None:
        """The line to write for a refusal of ``uid`` at ``now`` (monotonic), or None: suppressed and counted."""
        last = self._seen.get(uid)
        if last is not None and now - last[0] < self.every:
            last[1] += 1
            return None
        more = int(last[1]) if last is not None else 0
        if last is None and len(self._seen) >= 1024:  # bounded: uids are few, but never trust that
            self._seen.clear()
        self._seen[uid] = [now, 0]
        return f"refused a connection from uid {uid}" + (
            f" ({more} more refused since the last such line)" if more else ""
        )


_WARM_TRIM_ABOVE = 16 << 20  # RSS grown this much over the last trimmed level: give freed memory back


class WarmServer:
    """The background process (docs/contract.md §14): accepts its own uid's connections on the socket, runs each
    forwarded command through ``main`` with ``WarmRun``, lists and stops on request, closes idle sessions, and
    exits when it holds none and has had no request for the last command's ``--keep-alive``; SIGTERM, SIGINT
    and SIGHUP close everything. Started by ``_warm_spawn`` as ``bkmcp --keep-alive-daemon DIR FD``; its socket
    is its build's own (``warm_socket_name``), reached through the folder's descriptor like everything in it."""

    def __init__(self, place: WarmPlace, artifact: str, log: Log) -> None:
        self.place = place
        self.build = warm_build(artifact)
        self.name = warm_socket_name(self.build)
        self.path = os.path.join(place.path, self.name)  # shown only
        self.log = log
        self.sessions = WarmSessions(log)
        self.linger = KEEP_ALIVE_DEFAULT
        self.last = time.monotonic()
        self.running = 0
        self.stopping = False
        self.retiring = False
        self._lock = _thread.allocate_lock()
        self._inode: int | None = None
        self._rss_floor = resident_set_size() or 0  # RSS after the last trim (``_trim_memory``)
        self._trimming = False
        self._trim_again = False  # a command's trim is repeated on the next idle tick
        self._refusals = RefusalNotes()

    def serve(self) -> int:
        import signal
        import socket
        import threading

        def on_signal(signum: int, frame: Any) -> None:
            self.stopping = True

        if threading.current_thread() is threading.main_thread():  # (tests serve from a thread)
            for name in ("SIGTERM", "SIGINT", "SIGHUP"):
                signal.signal(getattr(signal, name), on_signal)
        os.umask(0o077)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            listener.bind(self.place.address(self.name))
        except OSError as exc:  # another process took the path first: it serves
            self.log.warn(f"cannot listen on {self.path}: {exc.strerror or exc}")
            return EXIT_LOCAL
        self._inode = self._socket_inode()
        listener.listen(128)
        listener.settimeout(0.25)
        try:
            while not self.stopping:
                try:
                    conn, _ = listener.accept()
                except socket.timeout:
                    conn = None
                except OSError as exc:  # e.g. out of descriptors: the next accept may work
                    self.log.debug(f"accept failed: {exc.strerror or exc}")
                    time.sleep(0.05)
                    conn = None
                if conn is not None:
                    with self._lock:
                        self.running += 1
                        self.last = time.monotonic()
                    threading.Thread(target=self._handle, args=(conn,), name="bkmcp-warm", daemon=True).start()
                    continue
                if self._done():
                    break
                if self.running == 0:
                    self._trim_memory(again=True)
        finally:
            self._unlink()
            listener.close()
            self.sessions.close_all()
        return EXIT_OK

    def _done(self) -> bool:
        """Time to exit: retiring and idle, or no session and no request for ``linger``."""
        left = self.sessions.reap()
        with self._lock:
            idle = self.running == 0
            quiet = time.monotonic() - self.last >= self.linger
        if self.retiring and idle:
            return True
        if not self.retiring and not self._still_ours():
            self.retiring = True
        return idle and left == 0 and quiet

    def _socket_inode(self) -> int | None:
        try:
            return os.stat(self.name, dir_fd=self.place.fd, follow_symlinks=False).st_ino
        except OSError:
            return None

    def _still_ours(self) -> bool:
        return self._inode is not None and self._socket_inode() == self._inode

    def _unlink(self) -> None:
        if self._still_ours():
            try:
                os.unlink(self.name, dir_fd=self.place.fd)
            except OSError:
                pass

    def _handle(self, conn: Any) -> None:
        import json

        try:
            uid = peer_uid(conn)
            if uid != os.getuid():  # the folder is 0700; this holds even if it were not
                with self._lock:
                    line = self._refusals.line(uid, time.monotonic())
                if line is not None:
                    self.log.warn(line)
                return
            frame = recv_frame(conn)
            if frame is None or frame[0] != b"R":
                return
            request = json.loads(frame[1].decode("utf-8", "surrogatepass"))
            op = request.get("op")
            if op == "list":
                data = {"running": True, "pid": os.getpid(), "build": self.build, "socket": self.path}
                send_frame(conn, b"L", dump_json({**data, "sessions": self.sessions.listing()}).encode("utf-8"))
            elif op == "stop":
                count = len(self.sessions.listing())
                self.retiring = True  # no new command runs; the servers are gone before the answer
                self._unlink()
                self.sessions.close_all()
                stopped = {"running": True, "stopped": True, "closed": count, "pid": os.getpid(), "build": self.build}
                send_frame(conn, b"L", dump_json(stopped).encode())
                self.stopping = True
            elif op in ("run", "complete") and request.get("build") != self.build:
                send_frame(conn, b"M")  # socket names of two builds collided: that client runs one-shot
            elif op in ("run", "complete") and not (self.stopping or self.retiring):
                send_frame(conn, b"A")
                status = self._run(conn, request, peek=op == "complete")
                if status is not None:  # the command's objects are gone with _run's frame: memory back first, so
                    self._trim_memory()  # a client that saw its exit status sees it back too
                    send_frame(conn, b"X", json.dumps({"status": status}).encode())
        except (OSError, ValueError, KeyError, TypeError) as exc:
            self.log.debug(f"a client connection failed: {type(exc).__name__}")
        finally:
            conn.close()
            with self._lock:
                self.running -= 1
                self.last = time.monotonic()

    def _run(self, conn: Any, request: dict[str, Any], *, peek: bool = False) -> int | None:
        """One forwarded command; its exit status (for the X frame), None when the client sent no stdin. ``peek``:
        a completion's (``--completion tools|flags|…``), which uses a kept session or none and sets no linger."""
        import io
        import threading

        stdin = b""
        if request.get("stdin"):
            frame = recv_frame(conn)
            if frame is None or frame[0] != b"I":
                return None
            stdin = frame[1]
        seconds = self.linger if peek else float(request["keep_alive"])
        with self._lock:
            self.linger = seconds
        lock = threading.Lock()
        interrupt = Interrupt()

        def watch() -> None:  # the client's Ctrl-C (a C frame) or its end: the call is cancelled on the wire
            try:
                frame = recv_frame(conn)
            except OSError:
                frame = None
            if frame is None or frame[0] == b"C":
                interrupt.fire()

        def heard(method: str) -> None:
            with lock:
                send_frame(conn, b"S", stage_of(method).encode("utf-8"))

        threading.Thread(target=watch, name="bkmcp-warm-watch", daemon=True).start()
        warm = WarmRun(
            self.sessions.for_command(request["cwd"], seconds, peek=peek), interrupt, heard, float(request["timeout"])
        )
        return main(
            request["argv"],
            stdin=io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8", errors="surrogateescape"),
            stdout=_FrameStream(conn, b"O", bool(request.get("stdout_tty")), lock),  # type: ignore[arg-type]
            stderr=_FrameStream(conn, b"E", bool(request.get("stderr_tty")), lock),  # type: ignore[arg-type]
            env=request["env"],
            cwd=request["cwd"],
            warm=warm,
        )

    def _trim_memory(self, *, again: bool = False) -> None:
        """After a command that left RSS well above the last trimmed level (a large result), return the freed
        memory to the system, and once more on the next idle tick (``again``: what its threads let go of only
        after its answer); otherwise nothing (one read of /proc/self/statm)."""
        rss = resident_set_size()
        if rss is None or not (again and self._trim_again) and rss < self._rss_floor + _WARM_TRIM_ABOVE:
            return
        with self._lock:
            if self._trimming:
                return
            self._trimming = True
        try:
            release_free_memory()
            self._rss_floor = resident_set_size() or rss
            self._trim_again = not again
        finally:
            self._trimming = False


def serve_warm_process(args: Sequence[str]) -> int:  # pyz: remote part
    """``bkmcp --keep-alive-daemon DIR FD``: the background process ``_warm_spawn`` starts, given the folder the
    client checked as the open descriptor FD (DIR only names it)."""
    fd = int(args[2]) if len(args) == 3 and args[2].isdigit() else None
    artifact = warm_artifact()
    place = open_private_dir(args[1], fd)[0] if fd is not None and artifact is not None else None
    if place is None or artifact is None:
        sys.stderr.write("bkmcp: --keep-alive-daemon is started by bkmcp itself (--keep-alive) in its private folder\n")
        return EXIT_LOCAL
    os.set_inheritable(place.fd, False)  # never handed on to a server
    log = Log(_BoundedText(sys.stderr))  # type: ignore[arg-type]
    os.fchdir(place.fd)  # every command brings its own cwd: this process pins no user directory
    limit_malloc_arenas()
    keep_large_blocks_mapped()
    return WarmServer(place, artifact, log).serve()


# -- 11.5 last: word_for_cli, main and the exit ladder (docs/contract.md §7) -------------------------------------------
# ``main(argv) -> int`` routes a command to the runner (or the warm client, or the background process) and is the
# one place an exception becomes an exit status: ``report_error`` prints the failure envelope of a ``BkmcpError``
# worded for the CLI (``word_for_cli``); anything else is ``internal_error``, Ctrl-C exit 130. The process of a short
# command then ends without the interpreter's last collection (``_end_without_a_last_collection``).

# How the CLI words the remedies that library errors leave neutral (their ``remedy`` field): it names its own options.
_CLI_REMEDIES = {
    "timeout": lambda hint, server: "raise --timeout if the server is slow, or run with -v to see which step waits",
    "timeout_stdio": lambda hint, server: "raise --timeout if the server is slow, or run with -v to see its stderr",
    "retry_delay": lambda hint, server: "raise --timeout",
    "tls": lambda hint, server: f"{hint}; --insecure skips verification (only for servers you trust)",
    "stdio_exit": lambda hint, server: f"run with -v to see its stderr; {hint}",
    "list_tools": lambda hint, server: f"run: {server} --tools",
}


def word_for_cli(error: BkmcpError, server_name: str, config: str | None = None) -> BkmcpError:
    """``error`` in the CLI's words, built from its fields: budgets name ``--timeout``, remedies name CLI options
    and commands carry the given ``--config`` (a copy; the error quoted as its ``cause`` is worded too)."""
    changes: dict[str, Any] = {"remedy": None}
    if error.what is not None and error.budget is not None:
        changes["message"] = f"{error.what} within --timeout {format_duration(error.budget)}"
    word = _CLI_REMEDIES.get(error.remedy or "")
    if word is not None and error.hint is not None:
        changes["hint"] = word(error.hint, build_server_command(server_name, config))
    if error.cause is not None:
        changes["cause"] = word_for_cli(error.cause, server_name, config)
    return error.copy(**changes)


def main(
    argv: Sequence[str] | None = None,
    *,
    stdin: IO[str] | None = None,
    stdout: IO[str] | None = None,
    stderr: IO[str] | None = None,
    env: Mapping[str, str] | None = None,
    cwd: str | None = None,
    warm: WarmRun | None = None,
) -> int:
    """Run bkmcp; the only place where exceptions become envelopes and exit statuses (docs/design.md, Code style).
    ``warm``: the warm process runs this command for a client (docs/contract.md §14). With no ``argv`` the process
    is taken as this command's own: a short command then ends without the interpreter's last collection
    (``_end_without_a_last_collection``); pass ``argv`` to run commands inside a longer-lived program."""
    envr = Environment(
        stdin=stdin if stdin is not None else sys.stdin,
        stdout=stdout if stdout is not None else sys.stdout,
        stderr=stderr if stderr is not None else sys.stderr,
        env=env if env is not None else os.environ,
        cwd=cwd if cwd is not None else os.getcwd(),
        warm=warm,
    )
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == [WARM_DAEMON] and warm is None:
        return serve_warm_process(args)
    log = Log(envr.stderr, verbose=any(a in ("-v", "--verbose") for a in args))
    runner: Runner | None = None
    try:
        inv = parse_argv(args)
        if argv is None and warm is None and not inv.resident:  # this process is one short command
            import atexit

            SHORT_COMMAND[:] = [True]
            atexit.unregister(_end_without_a_last_collection)  # once, however often main() runs
            atexit.register(_end_without_a_last_collection)
        runner = Runner(inv, envr, log)
        return runner.run()
    except KeyboardInterrupt:
        cancelled = runner.cancelled() if runner is not None else None
        if cancelled is None:  # nothing was sent yet: nothing to report but the interruption itself
            log.warn("interrupted")
            return EXIT_INTERRUPTED
        return report_error(cancelled, envr, log)
    except BkmcpError as exc:
        return report_error(exc, envr, log)
    except BrokenPipeError:
        return EXIT_REMOTE if runner is not None and runner.remote_started else EXIT_LOCAL
    except Exception as exc:  # the last rung of the ladder: never a traceback unless asked for
        if envr.env.get("BKMCP_TRACEBACK") == "1":
            import traceback

            traceback.print_exc(file=envr.stderr)
        remote = runner is not None and runner.remote_started
        error = InternalError(
            f"internal error: {type(exc).__name__}: {first_line(exc)}",
            hint="this is a bkmcp bug; re-run with BKMCP_TRACEBACK=1 and report it"
            + ("; the remote operation may already have happened, do not retry it blindly" if remote else ""),
        )
        error.exit_status = EXIT_REMOTE if remote else EXIT_LOCAL
        return report_error(error, envr, log)


def _end_without_a_last_collection() -> None:
    """The exit of a short command, registered by ``main`` when it runs the process's own command (no ``argv``; not
    the resident, not the background process): one collection, then every object left is frozen (``gc.freeze``),
    so the collections the interpreter runs while it tears the modules down have nothing to look at (~8 ms of a
    ~100 ms ``--tools`` over HTTP, 3.11-3.13). Exact: this runs after every exit handler registered during the
    command (last in, first out), and its collection finalizes all that is garbage by then, as those collections
    would, but for what was frozen earlier: the heap as it was when the HTTP stack had been loaded
    (``import_httpx``, before the first request is sent: modules and the command's records). What is left
    unfrozen is reachable, and of that only reference cycles are never collected. A short command leaves nothing,
    frozen or not, whose finalizer would do anything — no open socket or file, child process, suspended generator,
    database connection or other ``__del__`` — which tests/artifact/test_pyz_exit.py checks at the exit of the
    real entry point on every Python. The memory goes with the process."""
    import gc

    try:
        gc.collect()
        freeze_heap()
    except KeyboardInterrupt:  # a Ctrl-C as the process ends: it ends as the interpreter would, without a traceback
        pass


def report_error(exc: BkmcpError, envr: Environment, log: Log) -> int:
    envelope = build_failure(exc, log.redactor)
    try:
        if exc.exit_status != EXIT_LOCAL:  # remote (2), interrupted after a request was sent (130)
            # on stdout, like every other envelope: pretty on a terminal (emit_envelope), one line otherwise
            terminal = is_terminal(envr.stdout)
            envr.stdout.write(render_raw_text(dump_json(envelope, indent=2 if terminal else None), terminal) + "\n")
            envr.stdout.flush()
        else:  # piped, one line: a script reads the last line of stderr; on a terminal pretty, as on stdout
            terminal = is_terminal(envr.stderr)
            envr.stderr.write(render_raw_text(dump_json(envelope, indent=2 if terminal else None), terminal) + "\n")
            envr.stderr.flush()
    except (OSError, ValueError):
        pass
    return exc.exit_status


if __name__ == "__main__":
    sys.exit(main())
