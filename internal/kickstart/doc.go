// Package kickstart renders a Rocky Linux 9 kickstart for a disk install of
// the same layers as a netboot image: [Render] turns an [Image] (the view of
// an image's plan and lock that imgbuild fills) into the image's kickstart
// body, [Node] adds one node's part around it for bootd to serve. The package
// imports nothing of the image builder, so bootd links none of it.
//
// The body installs exactly the locked packages (name-version-release.arch,
// no weak dependencies, no @core), creates the layers' groups and users with
// their fixed ids, and replays the layers' files, services and commands in a
// %post in build order, as internal/rootfs applies them. File contents travel
// base64-encoded, so any bytes survive the kickstart and the shell; anything
// else that cannot be written safely (a double quote in a kernel argument, a
// command line kickstart would read as a section header) is an error naming
// the layer and the field.
//
// Nothing secret is ever rendered: the node's part only sets its address,
// locks root's password and points the installed system at bootd, whose
// overlay delivers keys at boot as it does for a netbooted node.
package kickstart
