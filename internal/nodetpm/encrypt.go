package nodetpm

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// The node decrypts with the openssl command line, the one bulk cipher tool a Rocky node has
// (tpm2-tools opens only the 32-byte secret). `openssl enc` takes no AEAD mode, and a key given
// as -K would show in the process list, so the node runs
//
//	openssl enc -d -aes-256-ctr -pbkdf2 -iter 1 -md sha256 -pass file:SECRET.hex
//
// with the secret tpm2_activatecredential recovered, in hex (a line of text, as -pass file:
// reads it). Encrypt writes that command's input format: "Salted__", an 8-byte salt, then the
// AES-256-CTR ciphertext, key and IV from PBKDF2-HMAC-SHA256 of the password. One iteration is
// enough: the password is 256 random bits, not something to guess.
//
// No MAC: the payload is confidential to the TPM, not authenticated. Anyone who knows the EK can
// make a credential (the EK is public), so a keyed check would not tell bootd's answer from a
// forged one; the node trusts the answer as much as it trusts plain HTTP from bootd's address
// (SECURITY.md), and gzip's CRC catches a corrupted one.
const (
	opensslMagic = "Salted__"
	saltSize     = 8
	pbkdf2Iter   = 1
)

// Encrypt encrypts plaintext for `openssl enc -d` as above, with secret as the password.
func Encrypt(rand io.Reader, secret, plaintext []byte) ([]byte, error) {
	salt := make([]byte, saltSize)
	if _, err := io.ReadFull(rand, salt); err != nil {
		return nil, err
	}
	stream, err := ctrStream(secret, salt)
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(opensslMagic)+saltSize+len(plaintext))
	copy(out, opensslMagic)
	copy(out[len(opensslMagic):], salt)
	stream.XORKeyStream(out[len(opensslMagic)+saltSize:], plaintext)
	return out, nil
}

// Decrypt reverses Encrypt (tests, and anyone checking what bootd sent).
func Decrypt(secret, data []byte) ([]byte, error) {
	head := len(opensslMagic) + saltSize
	if len(data) < head || string(data[:len(opensslMagic)]) != opensslMagic {
		return nil, fmt.Errorf("not openssl enc output with a salt")
	}
	stream, err := ctrStream(secret, data[len(opensslMagic):head])
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(data)-head)
	stream.XORKeyStream(out, data[head:])
	return out, nil
}

// ctrStream is openssl's AES-256-CTR for the hex of secret as password and salt.
func ctrStream(secret, salt []byte) (cipher.Stream, error) {
	password := hex.EncodeToString(secret)
	kiv, err := pbkdf2.Key(sha256.New, password, salt, pbkdf2Iter, 32+aes.BlockSize)
	if err != nil {
		return nil, err
	}
	block, err := aes.NewCipher(kiv[:32])
	if err != nil {
		return nil, err
	}
	return cipher.NewCTR(block, kiv[32:]), nil
}
