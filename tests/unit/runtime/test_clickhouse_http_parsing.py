"""The pure rules of the sink's ClickHouse HTTP interface and of the SQL CLI's output."""

from __future__ import annotations

import datetime as dt
import gzip
import zlib

import lz4.frame
import pytest
from backports import zstd

from runtime.clickhouse.http_protocol import (
    DEFAULT_FORMAT,
    InsertData,
    RequestError,
    decompress_body,
    error_body,
    error_code,
    explicit_format,
    http_status,
    parse_request,
    produces_result,
    split_insert,
    split_params,
)
from runtime.clickhouse.sql import clickhouse_message, render_table

NATIVE = b"\x02\x01\x01a\x06String\x06FORMAT\n\x00\xff"  # binary data that says FORMAT


def test_query_param_and_body_are_joined_by_a_line_feed():
    q = parse_request("POST", [("query", "SELECT 1 +")], b"2", "qid")
    assert q.sql == "SELECT 1 +\n2"
    assert (q.default_format, q.query_id, q.database) == (DEFAULT_FORMAT, "qid", "")
    assert not q.readonly
    assert parse_request("POST", [], b"  SELECT 3\n", "qid").sql == "SELECT 3"
    assert parse_request("GET", [("query", "SELECT 4")], b"", "qid").readonly


def test_url_parameters_become_settings_binds_database_format_and_id():
    params = [
        ("query", "SELECT {n:UInt8}"),
        ("database", "turnstream"),
        ("default_format", "JSONEachRow"),
        ("query_id", "mine"),
        ("param_n", "7"),
        ("max_threads", "1"),
        ("wait_end_of_query", "1"),
        ("client_protocol_version", "54405"),
        ("enable_http_compression", "1"),
    ]
    q = parse_request("POST", params, b"", "fallback")
    assert q.params == {"n": "7"}
    # enable_http_compression is a setting too (the HTTP layer also reads it: http_transport)
    assert q.settings == {"max_threads": "1", "enable_http_compression": "1"}
    assert (q.database, q.default_format, q.query_id) == ("turnstream", "JSONEachRow", "mine")


def test_a_setting_name_that_is_not_an_identifier_is_refused():
    with pytest.raises(RequestError) as refused:
        split_params({"max_threads = 1; DROP": "x"})
    assert refused.value.number == 115


def test_empty_or_undecodable_queries_are_refused_with_codes():
    with pytest.raises(RequestError) as empty:
        parse_request("POST", [], b" \n ", "q")
    assert empty.value.number == 62
    with pytest.raises(RequestError) as binary:
        parse_request("POST", [], b"SELECT '\xff'", "q")
    assert binary.value.number == 36


def test_insert_data_starts_after_the_format_name_and_one_line_break():
    head = b"INSERT INTO turnstream.x (`a`, format) FORMAT Native\n"
    insert = split_insert(head + NATIVE)
    assert insert == InsertData("INSERT INTO turnstream.x (`a`, format)", "", "Native", NATIVE)
    crlf = split_insert(b"insert into t format CSV \r\n1,2\n")
    assert crlf is not None and (crlf.fmt, crlf.data) == ("CSV", b"1,2\n")
    assert split_insert(b"INSERT INTO t FORMAT TSV").data == b""  # type: ignore[union-attr]


def test_insert_from_the_query_parameter_takes_the_body_as_data():
    q = parse_request("POST", [("query", "INSERT INTO t FORMAT RowBinary")], NATIVE, "q")
    assert q.insert == InsertData("INSERT INTO t", "", "RowBinary", NATIVE)
    assert q.sql == "" and q.output_format is None


def test_insert_settings_clause_stays_before_format_in_the_infile_form():
    insert = split_insert(b"INSERT INTO t SETTINGS async_insert = 0 FORMAT CSV\n1\n")
    assert insert is not None and insert.settings == "SETTINGS async_insert = 0"
    assert insert.infile_sql("/tmp/it's") == (
        "INSERT INTO t FROM INFILE '/tmp/it\\'s' SETTINGS async_insert = 0 FORMAT CSV"
    )


@pytest.mark.parametrize(
    "sql",
    [
        b"INSERT INTO t VALUES ('FORMAT CSV')",
        b"INSERT INTO t SELECT * FROM s FORMAT CSV",
        b"SELECT 1 FORMAT CSV",
        b"-- INSERT INTO t FORMAT CSV\nSELECT 1",
        b"INSERT INTO format FORMAT",  # FORMAT after INTO is the table's name
    ],
)
def test_statements_without_inline_data_are_run_as_they_are(sql):
    assert split_insert(sql) is None


def test_format_clause_detection_ignores_strings_columns_and_subqueries():
    assert explicit_format("SELECT 1 FORMAT JSON") == "JSON"
    assert explicit_format("select 1 format CSVWithNames;") == "CSVWithNames"
    assert explicit_format("SELECT 1 FORMAT JSON SETTINGS max_threads = 1") == "JSON"
    assert explicit_format("SELECT format FROM t") is None
    assert explicit_format("SELECT 'FORMAT JSON'") is None
    assert explicit_format("SELECT * FROM (SELECT 1 FORMAT JSON)") is None
    assert explicit_format("SELECT 1 /* FORMAT JSON */") is None


def test_output_format_is_absent_for_statements_without_a_result_set():
    def fmt(sql: str, default: str = "") -> str | None:
        params = [("default_format", default)] if default else []
        return parse_request("POST", params, sql.encode(), "q").output_format

    assert fmt("SELECT 1") == DEFAULT_FORMAT
    assert fmt("  (SELECT 1)", "JSON") == "JSON"
    assert fmt("WITH 1 AS x SELECT x FORMAT CSV") == "CSV"
    assert fmt("/* c */ show tables") == DEFAULT_FORMAT
    assert fmt("CREATE TABLE t (a UInt8) ENGINE = Memory") is None
    assert fmt("INSERT INTO t VALUES (1)") is None
    assert produces_result("DESC t") and not produces_result("DROP TABLE t")


def test_bodies_are_decompressed_as_clickhouse_connect_sends_them():
    data = b"INSERT INTO t FORMAT CSV\n" + b"1,2\n" * 1000
    half = len(data) // 2
    lz4_blocks = lz4.frame.compress(data[:half]) + lz4.frame.compress(data[half:])
    assert decompress_body(lz4_blocks, "lz4") == data  # one frame per block
    assert decompress_body(zstd.compress(data), "zstd") == data
    assert decompress_body(gzip.compress(data), "gzip") == data
    assert decompress_body(zlib.compress(data), "deflate") == data
    raw = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    assert decompress_body(raw.compress(data) + raw.flush(), "deflate") == data
    assert decompress_body(data, "") == data
    assert decompress_body(gzip.compress(zstd.compress(data)), "zstd, gzip") == data


@pytest.mark.parametrize(("body", "encoding"), [(b"junk", "gzip"), (b"junk", "lz4"), (b"x", "xz")])
def test_bad_or_unknown_encodings_are_client_errors(body, encoding):
    with pytest.raises(RequestError) as refused:
        decompress_body(body, encoding)
    assert refused.value.number == 36 and http_status(refused.value.number) == 400


def test_engine_errors_keep_their_code_message_and_status():
    message = "something: Code: 60. DB::Exception: Unknown table expression identifier 'x'."
    assert error_code(message) == 60 and http_status(60) == 404
    assert error_body(60, message) == (
        "Code: 60. DB::Exception: Unknown table expression identifier 'x'.\n"
    )
    assert error_code("no code here") == 1001 and http_status(1001) == 500
    assert error_body(36, "bad") == "Code: 36. DB::Exception: bad\n"
    assert http_status(62) == 400


def test_table_aligns_columns_and_counts_rows():
    rows = [
        ("acme", 3, 1.5, dt.datetime(2024, 5, 1, 12, 0, 1), ["a"]),
        ("b", 12, None, dt.datetime(2024, 5, 2), []),
    ]
    text = render_table(["tenant", "turns", "cost", "at", "tags"], rows).splitlines()
    assert text[0] == "tenant  turns  cost  at                   tags"
    assert text[1] == "------  -----  ----  -------------------  -----"
    assert text[2] == "acme        3   1.5  2024-05-01 12:00:01  ['a']"
    assert text[3] == "b          12  NULL  2024-05-02 00:00:00  []"
    assert text[4] == "(2 rows)"
    assert render_table(["x"], []).splitlines() == ["x", "-", "(0 rows)"]


def test_cli_shows_the_servers_words():
    wrapped = (
        "Received ClickHouse exception, code: 62, server response: Code: 62. DB::Exception: "
        "Syntax error (SYNTAX_ERROR) (for url http://127.0.0.1:18123)"
    )
    assert clickhouse_message(Exception(wrapped)) == (
        "Code: 62. DB::Exception: Syntax error (SYNTAX_ERROR)"
    )
