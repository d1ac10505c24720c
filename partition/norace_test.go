//go:build !race

package partition

const raceBuild = false
