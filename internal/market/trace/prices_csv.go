package trace

import (
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/terrace-ml/terrace/internal/market"
)

var csvColumns = []string{"timestamp", "availability_zone", "instance_type", "product_description", "spot_price_usd"}

// ParsePricesCSV reads the CSV of ../shared/data/spot/: a header naming at
// least timestamp, availability_zone, instance_type, product_description
// and spot_price_usd (ondemand_price_usd optional), one price change a
// row, each market's rows in time order.
func ParsePricesCSV(source string, raw []byte, product string) (*Prices, error) {
	r := csv.NewReader(bytes.NewReader(raw))
	r.FieldsPerRecord = -1
	r.ReuseRecord = true
	header, err := r.Read()
	if errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: no header: %w", source, ErrEmpty)
	}
	if err != nil {
		return nil, fmt.Errorf("%s:1: %v: %w", source, err, ErrBadRow)
	}
	col := map[string]int{}
	for i, h := range header {
		col[strings.TrimSpace(h)] = i
	}
	for _, c := range csvColumns {
		if _, ok := col[c]; !ok {
			return nil, fmt.Errorf("%s:1: header has no column %q (a price trace is a CSV with a header naming %s, or AWS's describe-spot-price-history JSON): %w",
				source, c, strings.Join(csvColumns, ","), ErrBadRow)
		}
	}
	od, hasOD := col["ondemand_price_usd"]
	b := newBuilder(source, product)
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			line := 0
			if errors.As(err, &pe) {
				line = pe.StartLine
			}
			return nil, fmt.Errorf("%s:%d: %v: %w", source, line, err, ErrBadRow)
		}
		line, _ := r.FieldPos(0)
		if len(rec) != len(header) {
			return nil, b.rowErr(line, "%d fields, the header has %d", len(rec), len(header))
		}
		if err := addCSVRow(b, line, rec, col, od, hasOD); err != nil {
			return nil, err
		}
	}
	return b.done()
}

func addCSVRow(b *builder, line int, rec []string, col map[string]int, od int, hasOD bool) error {
	at, err := ParseTime(rec[col["timestamp"]])
	if err != nil {
		return b.fieldErr(line, "timestamp", err)
	}
	m := market.Market{Zone: strings.TrimSpace(rec[col["availability_zone"]]), Type: strings.TrimSpace(rec[col["instance_type"]])}
	if m.Zone == "" || m.Type == "" {
		return b.rowErr(line, "empty zone or instance type")
	}
	price, err := parsePrice(rec[col["spot_price_usd"]])
	if err != nil {
		return b.fieldErr(line, "spot_price_usd", err)
	}
	var onDemand float64
	if hasOD && strings.TrimSpace(rec[od]) != "" {
		if onDemand, err = parsePrice(rec[od]); err != nil {
			return b.fieldErr(line, "ondemand_price_usd", err)
		}
	}
	return b.add(line, m, strings.TrimSpace(rec[col["product_description"]]), at, price, onDemand, true)
}
