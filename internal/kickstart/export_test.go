package kickstart

// CheckStructure is for the tests of real images, in package kickstart_test.
var CheckStructure = checkStructure
