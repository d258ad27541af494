// Package gcm is AES-128-GCM (12-byte nonce, 16-byte tag) whose bulk path
// uses VAES and VPCLMULQDQ on 512-bit registers where the CPU and OS
// support AVX-512, and crypto/cipher's GCM everywhere else and for short
// inputs. Its output is byte for byte the standard construction
// (NIST SP 800-38D), interoperable with crypto/cipher's.
package gcm
