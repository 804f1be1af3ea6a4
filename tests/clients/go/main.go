// Command chclient runs statements through clickhouse-go v2 over HTTP, the driver behind
// Grafana's ClickHouse data source, against the sink's ClickHouse interface, and prints
// what came back as JSON (the integration tests read it).
//
//	chclient -addr 127.0.0.1:18123 -password P -compress lz4 query < statements.json
//	chclient -addr ... insert TABLE ROWS
//
// `query` reads a JSON list of {"sql": ..., "params": {...}} and prints one result per
// statement: column names, database types, rows as JSON values, or the server's error with
// its code. `insert` sends ROWS rows in one Native batch and prints the count read back.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"time"

	"github.com/ClickHouse/clickhouse-go/v2"
	"github.com/ClickHouse/clickhouse-go/v2/lib/driver"
)

type statement struct {
	SQL    string            `json:"sql"`
	Params map[string]string `json:"params"`
}

type failure struct {
	Code    int32  `json:"code"`
	Message string `json:"message"`
}

type result struct {
	Columns []string `json:"columns"`
	Types   []string `json:"types"`
	Rows    [][]any  `json:"rows"`
	Error   *failure `json:"error,omitempty"`
}

func main() {
	addr := flag.String("addr", "127.0.0.1:18123", "host:port of the HTTP interface")
	password := flag.String("password", "", "password of user default")
	compress := flag.String("compress", "none", "none | lz4 | zstd | gzip | deflate")
	flag.Parse()
	conn, err := open(*addr, *password, *compress)
	if err != nil {
		fail(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := conn.Ping(ctx); err != nil {
		fail(fmt.Errorf("ping: %w", err))
	}
	switch flag.Arg(0) {
	case "query":
		var statements []statement
		if err := json.NewDecoder(os.Stdin).Decode(&statements); err != nil {
			fail(fmt.Errorf("statements: %w", err))
		}
		results := make([]result, 0, len(statements))
		for _, s := range statements {
			results = append(results, run(ctx, conn, s))
		}
		emit(results)
	case "insert":
		rows, err := strconv.Atoi(flag.Arg(2))
		if err != nil {
			fail(err)
		}
		count, err := insert(ctx, conn, flag.Arg(1), rows)
		if err != nil {
			fail(err)
		}
		emit(map[string]uint64{"count": count})
	default:
		fail(fmt.Errorf("unknown command %q", flag.Arg(0)))
	}
}

func open(addr, password, compress string) (driver.Conn, error) {
	methods := map[string]clickhouse.CompressionMethod{
		"lz4": clickhouse.CompressionLZ4, "zstd": clickhouse.CompressionZSTD,
		"gzip": clickhouse.CompressionGZIP, "deflate": clickhouse.CompressionDeflate,
	}
	options := &clickhouse.Options{
		Addr:        []string{addr},
		Protocol:    clickhouse.HTTP,
		Auth:        clickhouse.Auth{Database: "turnstream", Username: "default", Password: password},
		DialTimeout: 30 * time.Second,
		ReadTimeout: 60 * time.Second,
	}
	if method, ok := methods[compress]; ok {
		options.Compression = &clickhouse.Compression{Method: method}
	}
	return clickhouse.Open(options)
}

func run(ctx context.Context, conn driver.Conn, s statement) result {
	if len(s.Params) > 0 {
		ctx = clickhouse.Context(ctx, clickhouse.WithParameters(s.Params))
	}
	rows, err := conn.Query(ctx, s.SQL)
	if err != nil {
		return result{Error: describe(err)}
	}
	defer rows.Close()
	out := result{Columns: rows.Columns(), Rows: [][]any{}}
	kinds := rows.ColumnTypes()
	for _, kind := range kinds {
		out.Types = append(out.Types, kind.DatabaseTypeName())
	}
	for rows.Next() {
		cells := make([]any, len(kinds))
		for i, kind := range kinds {
			cells[i] = reflect.New(kind.ScanType()).Interface()
		}
		if err := rows.Scan(cells...); err != nil {
			return result{Error: describe(err)}
		}
		row := make([]any, len(cells))
		for i, cell := range cells {
			row[i] = reflect.ValueOf(cell).Elem().Interface()
		}
		out.Rows = append(out.Rows, row)
	}
	if err := rows.Err(); err != nil {
		return result{Error: describe(err)}
	}
	return out
}

func insert(ctx context.Context, conn driver.Conn, table string, rows int) (uint64, error) {
	batch, err := conn.PrepareBatch(ctx, "INSERT INTO "+table+" (id, tag, at, words, score)")
	if err != nil {
		return 0, err
	}
	start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for i := 0; i < rows; i++ {
		var score *float64
		if i%2 == 0 {
			value := float64(i) / 4
			score = &value
		}
		words := make([]string, i%5)
		for j := range words {
			words[j] = "w"
		}
		at := start.Add(time.Duration(i) * time.Millisecond)
		if err := batch.Append(uint32(i), fmt.Sprintf("tag-%d", i%3), at, words, score); err != nil {
			return 0, err
		}
	}
	if err := batch.Send(); err != nil {
		return 0, err
	}
	var count uint64
	err = conn.QueryRow(ctx, "SELECT count() FROM "+table).Scan(&count)
	return count, err
}

func describe(err error) *failure {
	var exception *clickhouse.Exception
	if errors.As(err, &exception) {
		return &failure{Code: exception.Code, Message: exception.Message}
	}
	return &failure{Code: -1, Message: err.Error()}
}

func emit(value any) {
	if err := json.NewEncoder(os.Stdout).Encode(value); err != nil {
		fail(err)
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
