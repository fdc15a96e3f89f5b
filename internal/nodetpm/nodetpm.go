// Package nodetpm anchors a node's identity in its TPM 2.0: it reads and fingerprints endorsement
// keys (EK), checks the keys a node presents (its EK and an attestation key, AK, made under it),
// and seals a payload so that only that TPM can open it (TPM2_MakeCredential, as Keylime and
// SPIRE's TPM node attestor use it; the node opens it with tpm2-tools' tpm2_activatecredential).
//
// go-tpm (Google's TPM 2.0 library) does the TPM structures and the credential itself: the
// credential's KDFs, OAEP label and HMAC must match the TPM bit for bit, which is a solved
// problem best left to a library that is tested against real TPMs.
package nodetpm

import (
	"bytes"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"

	"github.com/google/go-tpm/tpm2"
)

// EK is a node's endorsement key as bootd records it: the public key, PKIX DER (what
// `openssl pkey -pubin -outform der` prints for tpm2_createek's -f pem output).
type EK struct{ DER []byte }

// Fingerprint is the EK's identity as `bootd nodes` shows it: the lower-case hex SHA-256 of its
// PKIX DER, what `openssl pkey -pubin -in ek.pem -outform der | sha256sum` prints.
func (e EK) Fingerprint() string {
	sum := sha256.Sum256(e.DER)
	return hex.EncodeToString(sum[:])
}

// Equal reports whether e and o are the same key.
func (e EK) Equal(o EK) bool { return bytes.Equal(e.DER, o.DER) }

// ErrNotEK is what the parsers wrap for keys bootd does not accept as an endorsement key.
var ErrNotEK = errors.New("not a TPM endorsement key bootd accepts")

// ekBits is the endorsement key bootd takes: RSA 2048, the TCG default template that every PC
// Client TPM supports and that tpm2_createek -G rsa makes.
const ekBits = 2048

// ParseEKFile reads an EK the admin pins (bootd assign --ek FILE): a PEM public key
// (tpm2_createek -f pem, tpm2_readpublic -f pem), an EK certificate in PEM or DER (the TPM
// maker's, as tpm2_getekcertificate saves it: its public key is the EK), or a TPM2B_PUBLIC as
// tpm2_createek -u writes it by default.
func ParseEKFile(data []byte) (EK, error) {
	if block, _ := pem.Decode(data); block != nil {
		switch block.Type {
		case "PUBLIC KEY":
			k, err := x509.ParsePKIXPublicKey(block.Bytes)
			if err != nil {
				return EK{}, fmt.Errorf("PEM public key: %w", err)
			}
			return ekFromKey(k)
		case "CERTIFICATE":
			return ekFromCert(block.Bytes)
		default:
			return EK{}, fmt.Errorf("PEM block %q: want PUBLIC KEY or CERTIFICATE", block.Type)
		}
	}
	if ek, err := ekFromCert(data); err == nil {
		return ek, nil
	}
	if pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](data); err == nil {
		if area, err := pub.Contents(); err == nil {
			return ekFromArea(area)
		}
	}
	return EK{}, errors.New("neither a PEM public key or certificate, a DER certificate, nor a TPM2B_PUBLIC (tpm2_createek -u)")
}

func ekFromCert(der []byte) (EK, error) {
	c, err := x509.ParseCertificate(der)
	if err != nil {
		return EK{}, fmt.Errorf("EK certificate: %w", err)
	}
	return ekFromKey(c.PublicKey)
}

// ekFromKey checks that k is an RSA 2048 key with the exponent TPMs use.
func ekFromKey(k any) (EK, error) {
	rk, ok := k.(*rsa.PublicKey)
	if !ok {
		return EK{}, fmt.Errorf("%w: a %T key; bootd takes RSA %d endorsement keys (tpm2_createek -G rsa)", ErrNotEK, k, ekBits)
	}
	if rk.N.BitLen() != ekBits || rk.E != 65537 {
		return EK{}, fmt.Errorf("%w: RSA %d bits, exponent %d; want %d bits, 65537", ErrNotEK, rk.N.BitLen(), rk.E, ekBits)
	}
	der, err := x509.MarshalPKIXPublicKey(rk)
	if err != nil {
		return EK{}, err
	}
	return EK{DER: der}, nil
}

// ekFromArea checks a TPM public area as a node's EK: an RSA 2048 restricted decryption key
// whose name and symmetric algorithms are the TCG EK template's (SHA-256, AES-128-CFB). Those
// are what MakeCredential uses besides the key; a key that differs would not open what bootd
// seals, so it is refused with a clear error instead.
func ekFromArea(a *tpm2.TPMTPublic) (EK, error) {
	if a.Type != tpm2.TPMAlgRSA {
		return EK{}, fmt.Errorf("%w: type %v, want RSA (tpm2_createek -G rsa)", ErrNotEK, a.Type)
	}
	attrs := a.ObjectAttributes
	if !attrs.Restricted || !attrs.Decrypt || attrs.SignEncrypt || !attrs.FixedTPM || !attrs.FixedParent {
		return EK{}, fmt.Errorf("%w: attributes are not those of an endorsement key (fixedtpm, fixedparent, restricted, decrypt)", ErrNotEK)
	}
	if a.NameAlg != tpm2.TPMAlgSHA256 {
		return EK{}, fmt.Errorf("%w: name algorithm %v, want SHA-256", ErrNotEK, a.NameAlg)
	}
	parms, err := a.Parameters.RSADetail()
	if err != nil {
		return EK{}, fmt.Errorf("%w: %w", ErrNotEK, err)
	}
	if err := checkAES128CFB(parms.Symmetric); err != nil {
		return EK{}, err
	}
	k, err := tpm2.Pub(*a)
	if err != nil {
		return EK{}, fmt.Errorf("%w: %w", ErrNotEK, err)
	}
	return ekFromKey(k)
}

func checkAES128CFB(sym tpm2.TPMTSymDefObject) error {
	if sym.Algorithm != tpm2.TPMAlgAES {
		return fmt.Errorf("%w: symmetric algorithm %v, want AES-128-CFB", ErrNotEK, sym.Algorithm)
	}
	bits, err := sym.KeyBits.AES()
	if err != nil || *bits != 128 {
		return fmt.Errorf("%w: symmetric key is not AES-128", ErrNotEK)
	}
	mode, err := sym.Mode.AES()
	if err != nil || *mode != tpm2.TPMAlgCFB {
		return fmt.Errorf("%w: symmetric mode is not CFB", ErrNotEK)
	}
	return nil
}

// ekArea is the TCG EK template (RSA 2048, low range) holding ek's key: what bootd seals to.
// Built from the recorded key rather than taken from the request, so nothing but the key comes
// from the node.
func ekArea(ek EK) (tpm2.TPMTPublic, error) {
	k, err := x509.ParsePKIXPublicKey(ek.DER)
	if err != nil {
		return tpm2.TPMTPublic{}, err
	}
	rk, ok := k.(*rsa.PublicKey)
	if !ok || rk.N.BitLen() != ekBits || rk.E != 65537 {
		return tpm2.TPMTPublic{}, fmt.Errorf("%w: recorded key is not RSA %d", ErrNotEK, ekBits)
	}
	area := tpm2.RSAEKTemplate
	area.Unique = tpm2.NewTPMUPublicID(tpm2.TPMAlgRSA, &tpm2.TPM2BPublicKeyRSA{Buffer: rk.N.FillBytes(make([]byte, ekBits/8))})
	return area, nil
}

// Evidence is what a node presents: its EK and an AK it made under the EK, each a TPM2B_PUBLIC
// as tpm2_createek -u and tpm2_createak -u write them.
type Evidence struct{ EK, AK []byte }

// Presented is a node's evidence, checked: the EK it claims, and the name of its AK.
type Presented struct {
	EK     EK
	akName []byte
}

// maxPublic bounds a TPM2B_PUBLIC: an RSA 2048 key's is about 320 bytes.
const maxPublic = 4096

// Check parses the evidence: the EK must be an endorsement key bootd accepts, the AK a restricted
// signing key that never leaves its TPM (fixedtpm, fixedparent, made inside it), as tpm2_createak
// makes one. Whether the AK really lives beside that EK is what the TPM itself checks when it
// opens a credential: it releases the secret only for an AK of that name loaded in the TPM that
// holds the EK's private key.
func (e Evidence) Check() (Presented, error) {
	if len(e.EK) > maxPublic || len(e.AK) > maxPublic {
		return Presented{}, errors.New("TPM public key larger than a TPM makes")
	}
	ekPub, err := unmarshalPublic(e.EK)
	if err != nil {
		return Presented{}, fmt.Errorf("EK: %w", err)
	}
	ek, err := ekFromArea(ekPub)
	if err != nil {
		return Presented{}, fmt.Errorf("EK: %w", err)
	}
	akPub, err := unmarshalPublic(e.AK)
	if err != nil {
		return Presented{}, fmt.Errorf("AK: %w", err)
	}
	a := akPub.ObjectAttributes
	if !a.Restricted || !a.SignEncrypt || a.Decrypt || !a.FixedTPM || !a.FixedParent || !a.SensitiveDataOrigin {
		return Presented{}, errors.New("AK: not a restricted signing key made inside its TPM (fixedtpm, fixedparent, sensitivedataorigin, restricted, sign)")
	}
	name, err := tpm2.ObjectName(akPub)
	if err != nil {
		return Presented{}, fmt.Errorf("AK: %w", err)
	}
	return Presented{EK: ek, akName: name.Buffer}, nil
}

// unmarshalPublic reads a TPM2B_PUBLIC with nothing after it.
func unmarshalPublic(b []byte) (*tpm2.TPMTPublic, error) {
	if len(b) < 2 || int(binary.BigEndian.Uint16(b))+2 != len(b) {
		return nil, errors.New("not a TPM2B_PUBLIC (tpm2_createek/tpm2_createak -u output)")
	}
	pub, err := tpm2.Unmarshal[tpm2.TPM2BPublic](b)
	if err != nil {
		return nil, err
	}
	return pub.Contents()
}

// SecretSize is the size of the secret a credential carries: the EK's name algorithm's digest
// (SHA-256), the most a credential holds.
const SecretSize = sha256.Size

// Seal makes a fresh random secret and the credential that carries it to the TPM holding ek's
// private key, for the AK p names, in the file format tpm2_makecredential writes and
// tpm2_activatecredential -i reads. p.EK need not be ek: sealing to the recorded EK with the
// presented AK's name yields a credential only the recorded TPM can open.
func Seal(rand io.Reader, ek EK, p Presented) (credential, secret []byte, err error) {
	area, err := ekArea(ek)
	if err != nil {
		return nil, nil, err
	}
	key, err := tpm2.ImportEncapsulationKey(&area)
	if err != nil {
		return nil, nil, err
	}
	secret = make([]byte, SecretSize)
	if _, err := io.ReadFull(rand, secret); err != nil {
		return nil, nil, err
	}
	idObject, encSecret, err := tpm2.CreateCredential(rand, key, p.akName, secret)
	if err != nil {
		return nil, nil, err
	}
	return credentialFile(idObject, encSecret), secret, nil
}

// credentialFile is tpm2-tools' makecredential file: magic 0xBADCC0DE and version 1 (big-endian
// 32-bit), then the TPM2B_ID_OBJECT and the TPM2B_ENCRYPTED_SECRET, each with its 16-bit size.
func credentialFile(idObject, encSecret []byte) []byte {
	var b bytes.Buffer
	_ = binary.Write(&b, binary.BigEndian, uint32(0xBADCC0DE))
	_ = binary.Write(&b, binary.BigEndian, uint32(1))
	_ = binary.Write(&b, binary.BigEndian, uint16(len(idObject)))
	b.Write(idObject)
	_ = binary.Write(&b, binary.BigEndian, uint16(len(encSecret)))
	b.Write(encSecret)
	return b.Bytes()
}
