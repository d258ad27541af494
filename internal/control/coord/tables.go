package coord

import (
	"encoding/json"
	"fmt"
	"slices"

	"github.com/terrace-ml/terrace/internal/control/api"
	"github.com/terrace-ml/terrace/internal/placement/layout"
	"github.com/terrace-ml/terrace/table"
)

// CreateTable adds a table, or checks that an identical one exists; the
// reply carries a layout that holds it.
func (m *Machine) CreateTable(id uint64, spec table.Spec) {
	if err := spec.Validate(); err != nil {
		m.fail(id, err)
		return
	}
	l := &m.st.Layout
	if t, ok := l.Table(spec.Name); ok {
		if t.Spec != spec {
			m.fail(id, fmt.Errorf("%w: %q is %+v, not %+v", api.ErrTableConflict, spec.Name, t.Spec, spec))
			return
		}
		m.replyLayout(id)
		return
	}
	l.Tables = append(slices.Clone(l.Tables), layout.Table{ID: m.lastTable() + 1, Spec: spec})
	m.note(api.EventTable, "", fmt.Sprintf("table %q (%d values a key)", spec.Name, spec.Width))
	m.publish()
	m.replyLayout(id)
}

// Report records a worker's final report; once every worker has reported
// or is gone, the Ready says so (AllReported).
func (m *Machine) Report(id uint64, rank int, report json.RawMessage) {
	if rank < 0 || rank >= m.st.Layout.Workers {
		m.fail(id, fmt.Errorf("%w: report from rank %d of %d", api.ErrBadRequest, rank, m.st.Layout.Workers))
		return
	}
	m.st.Reports[rank] = slices.Clone(report)
	m.dirty = true
	all := true
	for r := range m.st.Layout.Workers {
		if _, ok := m.st.Reports[r]; !ok && !m.finished(r) {
			all = false
		}
	}
	m.note(api.EventReported, m.workerName(rank), "")
	m.out.AllReported = m.out.AllReported || all
	if all {
		m.out.EndedJob = m.st.Layout.Job + 1
		m.endJob()
	}
	m.reply(Reply{ID: id})
}
