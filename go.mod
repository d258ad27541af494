module github.com/terrace-ml/terrace

go 1.26
