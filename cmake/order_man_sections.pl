#!/usr/bin/perl
# order_man_sections.pl FILE SECTION...: rewrites the man page FILE (help2man's
# output) with its .SH sections in the order given; a section not named keeps
# its place after those named. help2man fixes where ENVIRONMENT, FILES and
# EXAMPLES go; the project's pages put them where the man page test expects.
use strict;
use warnings;

my ($file, @order) = @ARGV;
open(my $in, '<', $file) or die "order_man_sections: $file: $!\n";
my $text = do { local $/; <$in> };
close($in);

my ($head, @parts) = split(/^(?=\.SH )/m, $text);
my %by_name;
my @names;
for my $part (@parts) {
  my ($name) = $part =~ /^\.SH "?([^"\n]*)"?\n/;
  push @names, $name;
  $by_name{$name} = $part;
}
my %named = map { $_ => 1 } @order;
my @out = (grep({ exists $by_name{$_} } @order), grep({ !$named{$_} } @names));

open(my $out, '>', $file) or die "order_man_sections: $file: $!\n";
print $out $head, map({ $by_name{$_} } @out);
close($out) or die "order_man_sections: $file: $!\n";
